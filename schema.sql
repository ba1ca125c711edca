-- schema.sql: the distird result cache (SQLite 3). It is embedded into the
-- daemon at build time (the Makefile turns it into the C string
-- cache_schema_sql) and applied by server/cache.c.
--
-- Migrations: each "-- version N" line starts the statements that take a
-- database from version N-1 to version N. On open, distird runs every
-- section above the file's PRAGMA user_version inside one BEGIN IMMEDIATE
-- transaction and then sets user_version to the last N. Sections are never
-- edited once released; a change is a new section. A database whose
-- user_version is newer than this file is refused.
--
-- The cache maps a key (SHA-256 over the canonical hashes of module,
-- hardware, strategy, options and the simulator version; see
-- server/key.c) to the packed distir.v1.SimResult, with a few columns
-- copied out of the result so that they can be queried and indexed.
-- Results are deterministic, so a row never changes once written; only
-- hits and last_hit are updated.

-- version 1
CREATE TABLE results (
    id INTEGER PRIMARY KEY,
    key BLOB NOT NULL UNIQUE CHECK (typeof(key) = 'blob' AND length(key) = 32),
    result BLOB NOT NULL,                   -- packed distir.v1.SimResult
    simulator_version TEXT NOT NULL,
    step_time_s REAL NOT NULL,              -- seconds
    peak_memory_bytes INTEGER NOT NULL,     -- bytes, max over devices
    created REAL NOT NULL,                  -- Unix time, seconds
    last_hit REAL,                          -- Unix time, seconds; NULL until the first hit
    hits INTEGER NOT NULL DEFAULT 0
);
CREATE INDEX results_step_time ON results (step_time_s);
CREATE INDEX results_peak_memory ON results (peak_memory_bytes);

-- version 2
-- Least-recently-used order for eviction, and a small table of facts about
-- the database itself.
CREATE INDEX results_last_hit ON results (last_hit);
CREATE TABLE meta (
    name TEXT PRIMARY KEY,
    value TEXT NOT NULL
) WITHOUT ROWID;
INSERT INTO meta (name, value) VALUES ('created', strftime('%Y-%m-%dT%H:%M:%SZ', 'now'));

-- version 3
-- Stored searches (the Search RPC): the key is SHA-256 over the search's key
-- (search_space.key, which covers module, hardware, N, constraints,
-- objective, K and the simulator version) and the shard i/n (server/search.c);
-- the value is the packed distir.v1.SearchResult. Like results, a row never
-- changes once written; only hits and last_hit are updated.
CREATE TABLE searches (
    id INTEGER PRIMARY KEY,
    key BLOB NOT NULL UNIQUE CHECK (typeof(key) = 'blob' AND length(key) = 32),
    result BLOB NOT NULL,                   -- packed distir.v1.SearchResult
    created REAL NOT NULL,                  -- Unix time, seconds
    last_hit REAL,                          -- Unix time, seconds; NULL until the first hit
    hits INTEGER NOT NULL DEFAULT 0
);
CREATE INDEX searches_last_hit ON searches (last_hit);

-- version 4
-- A checksum per stored value: SHA-256 of the blob in `result`, verified on
-- every read (server/cache.c). A row that fails it is deleted and reported as
-- corrupt; the daemon then computes the value again. NULL in rows written
-- before this version, which are read unverified until written again.
ALTER TABLE results ADD COLUMN checksum BLOB;
ALTER TABLE searches ADD COLUMN checksum BLOB;

-- version 5
-- CI baselines (server/baseline.c): every SetBaseline adds a row, the latest
-- of a (tenant, project, name) is the baseline, the rest its history. The
-- result is copied here (packed distir.v1.SimResult with its SHA-256), so a
-- baseline outlives the result's eviction from the cache. cache_key is the
-- key clients see (unscoped); tenant is '' without a token file.
CREATE TABLE baselines (
    id INTEGER PRIMARY KEY,
    tenant TEXT NOT NULL,
    project TEXT NOT NULL,
    name TEXT NOT NULL,
    label TEXT NOT NULL,                    -- e.g. a commit id
    created REAL NOT NULL,                  -- Unix time, seconds
    cache_key BLOB NOT NULL CHECK (typeof(cache_key) = 'blob' AND length(cache_key) = 32),
    step_time_s REAL NOT NULL,
    peak_memory_bytes INTEGER NOT NULL,
    result BLOB NOT NULL,
    checksum BLOB NOT NULL
);
CREATE INDEX baselines_by_name ON baselines (tenant, project, name, id);

-- version 6
-- Figures of simulated search candidates (the Search RPC), which every later
-- search of the same module, hardware and evaluation options takes instead
-- of simulating again: space is SHA-256 over search_space.eval_key (scoped
-- to the tenant like the other keys, server/search.c); entries are what one
-- search simulated since its last store (it stores as it goes and at its
-- end), search_memo_entry_pack records of 88 bytes each (lib/search/memo.c),
-- checked against checksum (SHA-256 of entries) on every read. A row never
-- changes once written.
CREATE TABLE search_evals (
    id INTEGER PRIMARY KEY,
    space BLOB NOT NULL CHECK (typeof(space) = 'blob' AND length(space) = 32),
    entries BLOB NOT NULL,
    created REAL NOT NULL,                  -- Unix time, seconds
    checksum BLOB NOT NULL
);
CREATE INDEX search_evals_by_space ON search_evals (space, id);

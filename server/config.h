/*
 * config.h: distird's settings. One table (SRV_CONFIG_LIST) drives the
 * command-line flags, the config file, validation, the defaults shown by
 * --help and the dump logged at start, in the manner of Redis's
 * static_configs[]. A flag is "--name VALUE" or "--name=VALUE"; the config
 * file holds "name value" or "name = value" lines with '#' comments. Flags
 * override the file, wherever --config appears on the command line.
 */
#ifndef DISTIRD_CONFIG_H
#define DISTIRD_CONFIG_H

#include <stdint.h>
#include <stdio.h>

#include "base/base.h"

typedef enum srv_config_type {
    SRV_CONFIG_STRING,
    SRV_CONFIG_INT,
    SRV_CONFIG_LEVEL, /* a log level name, stored as int */
} srv_config_type;

/* X(name, field, type, metavar, default, min, max, help). min/max apply to ints. */
#define SRV_CONFIG_LIST(X)                                                                         \
    X("listen", listen, STRING, "ADDR", "127.0.0.1:7878", 0, 0,                                    \
      "gRPC address host:port (port 0 picks a free one; unix:PATH for a socket)")                  \
    X("db", db, STRING, "PATH", "./distird.db", 0, 0, "SQLite cache database file")                \
    X("max-db-kb", max_db_kb, INT, "KIB", "4194304", 0, 1099511627776,                              \
      "cap on the cache file (0: none); when it is full the least recently used rows are "         \
      "evicted; a result that does not fit is answered but not stored")                            \
    X("workers", workers, INT, "N", "0", 0, 1024, "simulation worker threads (0: one per core)")   \
    X("worker-stack-mb", worker_stack_mb, INT, "MIB", "16", 1, 1024,                               \
      "stack size of each worker thread")                                                          \
    X("max-message-mb", max_message_mb, INT, "MIB", "64", 1, 2047,                                 \
      "largest request message accepted")                                                          \
    X("max-ops", max_ops, INT, "N", "1048576", 1, 1073741824, "most ops in a module")              \
    X("max-values", max_values, INT, "N", "4194304", 1, 1073741824, "most values in a module")     \
    X("max-depth", max_depth, INT, "N", "64", 4, 4096, "deepest protobuf nesting in a module")     \
    X("max-batch", max_batch, INT, "N", "4096", 1, 1048576,                                        \
      "most strategies in one SimulateBatch")                                                      \
    X("max-idle-s", max_idle_s, INT, "S", "300", 1, 86400,                                        \
      "a gRPC connection with no call for this long is closed (clients reconnect)")               \
    X("max-job-mb", max_job_mb, INT, "MIB", "0", 0, 1048576,                                       \
      "memory one simulation may take, estimated before it runs; larger ones are refused "          \
      "(0: half the memory, or of what RLIMIT_AS leaves, shared by the workers)")                   \
    X("tenant-max-jobs", tenant_max_jobs, INT, "N", "0", 0, 1048576,                              \
      "most simulations one tenant (--tokens) may have queued or running (0: no limit)")          \
    X("max-queue", max_queue, INT, "N", "1024", 1, 1048576,                                        \
      "most simulation jobs waiting for a worker")                                                 \
    X("max-search-candidates", max_search_candidates, INT, "N", "4194304", 1, 1073741824,          \
      "most candidates one Search may evaluate (larger spaces are RESOURCE_EXHAUSTED)")            \
    X("grace-ms", grace_ms, INT, "MS", "10000", 0, 3600000,                                        \
      "on SIGTERM, time in-flight calls get to finish before they are cancelled")                  \
    X("health-delay-ms", health_delay_ms, INT, "MS", "0", 0, 600000,                               \
      "on SIGTERM, time health reports NOT_SERVING before new calls are refused")                  \
    X("inline-decode-kb", inline_decode_kb, INT, "KIB", "1024", 0, 2097152,                        \
      "requests up to this size are decoded on the event loop, larger ones by a worker")           \
    X("log-level", log_level, LEVEL, "LEVEL", "info", 0, 0, "debug, info, warn or error")          \
    X("log-file", log_file, STRING, "PATH", "", 0, 0,                                              \
      "log file (empty: standard error; SIGHUP reopens)")                                          \
    X("metrics-listen", metrics_listen, STRING, "ADDR", "", 0, 0,                                  \
      "host:port of the Prometheus /metrics endpoint (empty: off)")                                \
    X("tls-cert", tls_cert, STRING, "PATH", "", 0, 0,                                              \
      "PEM server certificate (chain): serve TLS (SIGHUP reloads it)")                             \
    X("tls-key", tls_key, STRING, "PATH", "", 0, 0, "PEM private key of --tls-cert")               \
    X("tls-client-ca", tls_client_ca, STRING, "PATH", "", 0, 0,                                    \
      "PEM CA certificates that client certificates must chain to (mutual TLS)")                   \
    X("tls-require-client-cert", tls_require_client_cert, INT, "0|1", "0", 0, 1,                  \
      "1: refuse clients without a certificate from --tls-client-ca")                              \
    X("tokens", tokens, STRING, "PATH", "", 0, 0,                                                  \
      "tenants and their bearer tokens' SHA-256 (\"NAME SHA256 [admin]\" lines; SIGHUP reloads); "   \
      "calls without a listed token are UNAUTHENTICATED")                                          \
    X("shared-cache", shared_cache, INT, "0|1", "0", 0, 1,                                         \
      "1: tenants share stored results and searches (0: each tenant sees only its own)")           \
    X("insecure-public", insecure_public, INT, "0|1", "0", 0, 1,                                   \
      "1: allow a non-loopback --listen without TLS (refused otherwise)")                          \
    X("test-delay-ms", test_delay_ms, INT, "MS", "0", 0, 3600000,                                  \
      "testing only: every simulation job first waits this long, polling its cancel flag")

typedef struct srv_config {
#define SRV_CONFIG_FIELD_STRING(field) char *field;
#define SRV_CONFIG_FIELD_INT(field) int64_t field;
#define SRV_CONFIG_FIELD_LEVEL(field) int64_t field;
#define SRV_CONFIG_FIELD_(name, field, type, meta, dflt, min, max, help)                           \
    SRV_CONFIG_FIELD_##type(field)
    SRV_CONFIG_LIST(SRV_CONFIG_FIELD_)
#undef SRV_CONFIG_FIELD_
    char *config; /* the --config file, if any (flag only) */
} srv_config;

/* Sets every default. Free the strings with srv_config_fini. */
void srv_config_init(srv_config *c);
void srv_config_fini(srv_config *c);

/* Sets one setting by name ("max-ops" or "max_ops"); validates the value. */
int srv_config_set(srv_config *c, const char *name, const char *value, di_error *err);
/* Reads a config file. Errors name the file and line. */
int srv_config_load_file(srv_config *c, const char *path, di_error *err);
/* Parses text in the config-file format; origin names it in errors. */
int srv_config_load_text(srv_config *c, const char *text, const char *origin, di_error *err);

/* Results of srv_config_parse_args besides 0 and negative error codes. */
#define SRV_CONFIG_HELP 1
#define SRV_CONFIG_VERSION 2
/*
 * Parses argv (argv[0] is the program). Returns 0, SRV_CONFIG_HELP for
 * --help, SRV_CONFIG_VERSION for --version, or a negative code with err set.
 */
int srv_config_parse_args(srv_config *c, int argc, char **argv, di_error *err);

/* Prints every flag with its default and help. */
void srv_config_usage(FILE *f);
/* Appends "name=value" for every setting, space-separated (for the start log). */
void srv_config_dump(const srv_config *c, di_buf *out);

#endif

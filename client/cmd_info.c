/*
 * cmd_info.c: `distir info --server ADDR [--json] [--timeout-ms N]` prints
 * the daemon's ServerInfo: versions, uptime, workers, queue depth, cache size
 * and hit rate, as "key: value" lines or one JSON object.
 */
#include <stdio.h>
#include <stdlib.h>

#include "cli.h"
#include "rpc.h"

static const char usage[] = "info --server ADDR [--json] [--timeout-ms N]";

int
cmd_info(int argc, char **argv)
{
    const char *server = NULL, *v;
    int json = 0, timeout_ms = 10000;
    Distir__V1__ServerInfoReply *r;
    di_error err;
    for (int i = 1; i < argc; i++) {
        int rc;
        if (cli_is_help(argv[i])) {
            return cli_help(usage);
        } else if (cli_flag(argv[i], "--json")) {
            json = 1;
        } else if ((rc = cli_opt(argc, argv, &i, "--server", &v)) != 0) {
            if (rc < 0)
                return CLI_USAGE;
            server = v;
        } else if ((rc = cli_opt(argc, argv, &i, "--timeout-ms", &v)) != 0) {
            if (rc < 0)
                return CLI_USAGE;
            timeout_ms = atoi(v);
        } else {
            cli_error("unknown argument '%s'", argv[i]);
            return cli_usage(usage);
        }
    }
    if (server == NULL)
        return cli_usage(usage);
    if (rpc_server_info(server, timeout_ms, &r, &err) != 0) {
        cli_error("info from '%s' failed: %s", server, err.msg);
        return CLI_FAIL;
    }
    if (json) {
        di_buf b;
        di_buf_init(&b);
        di_buf_puts(&b, "{\"server\":");
        di_buf_json_str(&b, server);
        di_buf_puts(&b, ",\"version\":");
        di_buf_json_str(&b, r->version);
        di_buf_puts(&b, ",\"simulator_version\":");
        di_buf_json_str(&b, r->simulator_version);
        di_buf_puts(&b, ",\"uptime_s\":");
        di_buf_double(&b, r->uptime_s);
        di_buf_printf(&b, ",\"workers\":%u,\"queue_depth\":%u,\"cache_entries\":%llu", r->workers,
                      r->queue_depth, (unsigned long long)r->cache_entries);
        di_buf_printf(&b, ",\"cache_hits\":%llu,\"cache_misses\":%llu,\"cache_hit_rate\":",
                      (unsigned long long)r->cache_hits, (unsigned long long)r->cache_misses);
        di_buf_double(&b, r->cache_hit_rate);
        di_buf_printf(&b, ",\"requests\":%llu,\"database\":", (unsigned long long)r->requests);
        di_buf_json_str(&b, r->database);
        di_buf_puts(&b, "}\n");
        fputs(b.data, stdout);
        di_buf_fini(&b);
    } else {
        printf("server             %s\n", server);
        printf("version            %s\n", r->version);
        printf("simulator_version  %s\n", r->simulator_version);
        printf("uptime_s           %.3f\n", r->uptime_s);
        printf("workers            %u\n", r->workers);
        printf("queue_depth        %u\n", r->queue_depth);
        printf("cache_entries      %llu\n", (unsigned long long)r->cache_entries);
        printf("cache_hits         %llu\n", (unsigned long long)r->cache_hits);
        printf("cache_misses       %llu\n", (unsigned long long)r->cache_misses);
        printf("cache_hit_rate     %.4f\n", r->cache_hit_rate);
        printf("requests           %llu\n", (unsigned long long)r->requests);
        printf("database           %s\n", r->database);
    }
    protobuf_c_message_free_unpacked(&r->base, NULL);
    return CLI_OK;
}

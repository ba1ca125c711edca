/*
 * main.c: distird, the distir cost-model daemon. Parses the settings
 * (config.h), opens the log, starts the daemon (daemon.h) and runs its loop
 * until a graceful shutdown; exits 0 after a clean shutdown, 1 when start-up
 * fails, 2 on a usage error.
 */
#include <signal.h>
#include <stdio.h>

#include "config.h"
#include "daemon.h"
#include "log.h"
#include "sim/sim.h"

int
main(int argc, char **argv)
{
    srv_config cfg;
    srv_daemon d;
    di_error err;
    int rc;
    /*
     * The daemon transforms and simulates module after module: freed memory
     * stays in the heap for the next job. The simulator's largest tables are
     * mapped apart and kept by each worker's workspace.
     */
    di_heap_keep();
    srv_config_init(&cfg);
    di_error_clear(&err);
    rc = srv_config_parse_args(&cfg, argc, argv, &err);
    if (rc == SRV_CONFIG_HELP) {
        srv_config_usage(stdout);
        srv_config_fini(&cfg);
        return 0;
    }
    if (rc == SRV_CONFIG_VERSION) {
        printf("distird %s (%s)\n", DISTIR_VERSION, SIM_VERSION);
        srv_config_fini(&cfg);
        return 0;
    }
    if (rc != 0) {
        fprintf(stderr, "distird: %s\n", err.msg);
        srv_config_fini(&cfg);
        return 2;
    }
    rc = srv_log_open(cfg.log_file, (int)cfg.log_level);
    if (rc != 0) {
        fprintf(stderr, "distird: cannot open log file '%s'\n", cfg.log_file);
        srv_config_fini(&cfg);
        return 1;
    }
    /* A client that goes away mid-write must not kill the daemon. */
    signal(SIGPIPE, SIG_IGN);
    rc = srv_daemon_start(&d, &cfg, &err);
    if (rc != 0) {
        srv_log(SRV_LOG_ERROR, "start_failed", "code=%s error=\"%s\"", di_errname(rc), err.msg);
        fprintf(stderr, "distird: %s\n", err.msg);
        srv_log_close();
        srv_config_fini(&cfg);
        return 1;
    }
    rc = srv_daemon_run(&d);
    srv_log_close();
    srv_config_fini(&cfg);
    return rc;
}

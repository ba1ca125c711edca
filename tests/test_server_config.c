/*
 * test_server_config.c: distird's settings table (server/config.c):
 * defaults, flags in both forms, the config file and its precedence below
 * flags, validation with messages that name the setting (and the file line),
 * --help listing every flag with its default, and the status mapping of
 * server/status.c.
 */
/* cmocka needs these four first, in this order. */
#include <stdarg.h>
#include <stddef.h>
#include <setjmp.h>
#include <stdint.h>
#include <cmocka.h>

#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "../server/config.h"
#include "../server/log.h"
#include "../server/status.h"
#include "../server/tokens.h"

static int
parse(srv_config *c, di_error *err, int argc, const char **argv)
{
    srv_config_init(c);
    di_error_clear(err);
    return srv_config_parse_args(c, argc, (char **)argv, err);
}

static void
test_defaults(void **state)
{
    srv_config c;
    (void)state;
    srv_config_init(&c);
    assert_string_equal(c.listen, "127.0.0.1:7878");
    assert_string_equal(c.db, "./distird.db");
    assert_int_equal(c.workers, 0);
    assert_int_equal(c.max_message_mb, 64);
    assert_int_equal(c.max_depth, 64);
    assert_int_equal(c.log_level, SRV_LOG_INFO);
    assert_string_equal(c.log_file, "");
    assert_string_equal(c.metrics_listen, "");
    assert_int_equal(c.test_delay_ms, 0);
    srv_config_fini(&c);
}

static void
test_flags(void **state)
{
    srv_config c;
    di_error err;
    const char *argv[] = {"distird", "--listen",     "127.0.0.1:0", "--db=/tmp/x.db", "--workers",
                          "3",       "--max-ops=10", "--log-level", "debug",          "--max_queue",
                          "5"};
    (void)state;
    assert_int_equal(parse(&c, &err, 11, argv), 0);
    assert_string_equal(c.listen, "127.0.0.1:0");
    assert_string_equal(c.db, "/tmp/x.db");
    assert_int_equal(c.workers, 3);
    assert_int_equal(c.max_ops, 10);
    assert_int_equal(c.log_level, SRV_LOG_DEBUG);
    assert_int_equal(c.max_queue, 5);
    srv_config_fini(&c);
}

static void
test_flag_errors(void **state)
{
    srv_config c;
    di_error err;
    (void)state;
    const char *a1[] = {"distird", "--workers", "many"};
    assert_int_equal(parse(&c, &err, 3, a1), DI_EINVAL);
    assert_non_null(strstr(err.msg, "workers"));
    assert_non_null(strstr(err.msg, "many"));
    srv_config_fini(&c);
    const char *a2[] = {"distird", "--workers", "5000"};
    assert_int_equal(parse(&c, &err, 3, a2), DI_EINVAL);
    assert_non_null(strstr(err.msg, "out of range"));
    srv_config_fini(&c);
    const char *a3[] = {"distird", "--no-such-flag", "1"};
    assert_int_equal(parse(&c, &err, 3, a3), DI_EINVAL);
    assert_non_null(strstr(err.msg, "no-such-flag"));
    srv_config_fini(&c);
    const char *a4[] = {"distird", "--listen"};
    assert_int_equal(parse(&c, &err, 2, a4), DI_EINVAL);
    assert_non_null(strstr(err.msg, "needs a value"));
    srv_config_fini(&c);
    const char *a5[] = {"distird", "--log-level", "loud"};
    assert_int_equal(parse(&c, &err, 3, a5), DI_EINVAL);
    srv_config_fini(&c);
    const char *a6[] = {"distird", "stray"};
    assert_int_equal(parse(&c, &err, 2, a6), DI_EINVAL);
    srv_config_fini(&c);
    const char *a7[] = {"distird", "--max-ops", "12x"};
    assert_int_equal(parse(&c, &err, 3, a7), DI_EINVAL);
    srv_config_fini(&c);
}

static void
test_help_version(void **state)
{
    srv_config c;
    di_error err;
    (void)state;
    const char *a1[] = {"distird", "--workers", "2", "--help"};
    assert_int_equal(parse(&c, &err, 4, a1), SRV_CONFIG_HELP);
    srv_config_fini(&c);
    const char *a2[] = {"distird", "--version"};
    assert_int_equal(parse(&c, &err, 2, a2), SRV_CONFIG_VERSION);
    srv_config_fini(&c);
    /* --help names every setting of the dump, each with its default. */
    char *text = NULL;
    size_t len = 0;
    FILE *f = open_memstream(&text, &len);
    srv_config_usage(f);
    fclose(f);
    srv_config_init(&c);
    di_buf dump;
    di_buf_init(&dump);
    srv_config_dump(&c, &dump);
    char *save, *tok = strtok_r(dump.data, " ", &save);
    int n = 0;
    for (; tok != NULL; tok = strtok_r(NULL, " ", &save), n++) {
        char flag[80];
        snprintf(flag, sizeof flag, "--%.*s ", (int)strcspn(tok, "="), tok);
        assert_non_null(strstr(text, flag));
    }
    assert_true(n >= 15);
    assert_non_null(strstr(text, "(default: 127.0.0.1:7878)"));
    assert_non_null(strstr(text, "(default: ./distird.db)"));
    assert_non_null(strstr(text, "--config FILE"));
    di_buf_fini(&dump);
    srv_config_fini(&c);
    free(text);
}

static void
test_file(void **state)
{
    srv_config c;
    di_error err;
    char path[] = "/tmp/distird-config-XXXXXX";
    (void)state;
    int fd = mkstemp(path);
    assert_true(fd >= 0);
    const char text[] = "# distird settings\n"
                        "listen 127.0.0.1:9000\n"
                        "  db = \"/var/lib/distird/cache db.sqlite\"  \n"
                        "\n"
                        "workers=4\n"
                        "max_batch 7   \n"
                        "log-level warn\n";
    assert_int_equal(write(fd, text, sizeof text - 1), (ssize_t)(sizeof text - 1));
    close(fd);
    /* Flags override the file wherever --config appears. */
    const char *argv[] = {"distird", "--workers", "2", "--config", path};
    assert_int_equal(parse(&c, &err, 5, argv), 0);
    assert_string_equal(c.listen, "127.0.0.1:9000");
    assert_string_equal(c.db, "/var/lib/distird/cache db.sqlite");
    assert_int_equal(c.workers, 2);
    assert_int_equal(c.max_batch, 7);
    assert_int_equal(c.log_level, SRV_LOG_WARN);
    assert_string_equal(c.config, path);
    srv_config_fini(&c);
    unlink(path);
    const char *missing[] = {"distird", "--config", "/nonexistent/distird.conf"};
    assert_int_not_equal(parse(&c, &err, 3, missing), 0);
    assert_non_null(strstr(err.msg, "/nonexistent/distird.conf"));
    srv_config_fini(&c);
}

static void
test_file_errors(void **state)
{
    srv_config c;
    di_error err;
    (void)state;
    srv_config_init(&c);
    di_error_clear(&err);
    assert_int_equal(srv_config_load_text(&c, "workers 2\n\nbogus 1\n", "x.conf", &err), DI_EINVAL);
    assert_int_equal(err.line, 3);
    assert_non_null(strstr(err.msg, "x.conf:3"));
    assert_int_equal(strncmp(err.msg, "x.conf:3: unknown setting 'bogus'", 33), 0);
    assert_non_null(strstr(err.msg, "bogus"));
    di_error_clear(&err);
    assert_int_equal(srv_config_load_text(&c, "# ok\nmax-depth 2\n", "y.conf", &err), DI_EINVAL);
    assert_non_null(strstr(err.msg, "y.conf:2"));
    assert_non_null(strstr(err.msg, "max-depth"));
    /* Comments after values; '#' inside quotes is part of the value. */
    assert_int_equal(srv_config_load_text(&c, "workers 3   # per core\nlog-file \"/tmp/a#b\" # x\n",
                                          "w.conf", &err),
                     0);
    assert_int_equal(c.workers, 3);
    assert_string_equal(c.log_file, "/tmp/a#b");
    assert_int_equal(srv_config_load_text(&c, "db \"/tmp/x\n", "q.conf", &err), DI_EINVAL);
    assert_non_null(strstr(err.msg, "q.conf:1: unterminated quote"));
    /* An empty string is a value too. */
    assert_int_equal(srv_config_load_text(&c, "log-file \"\"\n", "z.conf", &err), 0);
    assert_string_equal(c.log_file, "");
    srv_config_fini(&c);
}

static void
test_log_helpers(void **state)
{
    char buf[64];
    (void)state;
    assert_int_equal(srv_log_level_parse("error"), SRV_LOG_ERROR);
    assert_int_equal(srv_log_level_parse("nope"), -1);
    assert_string_equal(srv_log_quote("plain", buf, sizeof buf), "plain");
    assert_string_equal(srv_log_quote("two words", buf, sizeof buf), "\"two words\"");
    assert_string_equal(srv_log_quote("a\"b", buf, sizeof buf), "\"a\\\"b\"");
    assert_string_equal(srv_log_quote("", buf, sizeof buf), "\"\"");
    assert_string_equal(srv_log_quote("k=v", buf, sizeof buf), "\"k=v\"");
}

static void
test_status_mapping(void **state)
{
    (void)state;
    assert_int_equal(srv_status_from_code(DI_OK), GRPC_STATUS_OK);
    assert_int_equal(srv_status_from_code(DI_EDECODE), GRPC_STATUS_INVALID_ARGUMENT);
    assert_int_equal(srv_status_from_code(DI_ETOODEEP), GRPC_STATUS_INVALID_ARGUMENT);
    assert_int_equal(srv_status_from_code(DI_EVERIFY), GRPC_STATUS_INVALID_ARGUMENT);
    assert_int_equal(srv_status_from_code(DI_EPARSE), GRPC_STATUS_INVALID_ARGUMENT);
    assert_int_equal(srv_status_from_code(DI_EINVAL), GRPC_STATUS_INVALID_ARGUMENT);
    assert_int_equal(srv_status_from_code(DI_ESTRATEGY), GRPC_STATUS_INVALID_ARGUMENT);
    assert_int_equal(srv_status_from_code(DI_ETOOBIG), GRPC_STATUS_RESOURCE_EXHAUSTED);
    assert_int_equal(srv_status_from_code(DI_ENOMEM), GRPC_STATUS_RESOURCE_EXHAUSTED);
    assert_int_equal(srv_status_from_code(DI_EUNSUPPORTED), GRPC_STATUS_UNIMPLEMENTED);
    assert_int_equal(srv_status_from_code(DI_ENOTFOUND), GRPC_STATUS_NOT_FOUND);
    assert_int_equal(srv_status_from_code(DI_ECANCELLED), GRPC_STATUS_CANCELLED);
    assert_int_equal(srv_status_from_code(DI_EINTERNAL), GRPC_STATUS_INTERNAL);
    assert_int_equal(srv_status_from_code(-999), GRPC_STATUS_INTERNAL);
    /* Every library code maps to something other than OK. */
#define CHECK_CODE_(name, code, msg)                                                               \
    assert_int_not_equal(srv_status_from_code(code), GRPC_STATUS_OK);
    DI_ERROR_LIST(CHECK_CODE_)
#undef CHECK_CODE_
    assert_string_equal(srv_status_name(GRPC_STATUS_RESOURCE_EXHAUSTED), "RESOURCE_EXHAUSTED");
    assert_string_equal(srv_status_name(GRPC_STATUS_UNAUTHENTICATED), "UNAUTHENTICATED");
    assert_string_equal(srv_status_name((grpc_status_code)40), "UNKNOWN_STATUS");
}

/* The token file (--tokens): tenants, admin flags, lookups by hash, errors naming the line. */
static void
test_tokens(void **state)
{
    (void)state;
    char text[512];
    di_hash ha, hb, hx;
    char hexa[65], hexb[65];
    srv_tenants *ts = NULL;
    di_error err;
    di_sha256_once("alice-token", 11, &ha);
    di_sha256_once("root-token", 10, &hb);
    di_sha256_once("other", 5, &hx);
    di_hash_hex(&ha, hexa);
    di_hash_hex(&hb, hexb);
    snprintf(text, sizeof text, "# tenants\n\nalice %s\n  root\t%s admin # the admin\n", hexa,
             hexb);
    di_error_clear(&err);
    assert_int_equal(srv_tenants_parse(text, strlen(text), "t", &ts, &err), 0);
    assert_int_equal(srv_tenants_count(ts), 2);
    const srv_tenant *a = srv_tenants_find(ts, &ha), *r = srv_tenants_find(ts, &hb);
    assert_non_null(a);
    assert_non_null(r);
    assert_string_equal(a->name, "alice");
    assert_false(a->admin);
    assert_string_equal(r->name, "root");
    assert_true(r->admin);
    assert_null(srv_tenants_find(ts, &hx));
    srv_tenants_free(ts);
    /* Errors name the line; nothing is returned. */
    snprintf(text, sizeof text, "alice %s\nalice %s\n", hexa, hexb);
    assert_int_equal(srv_tenants_parse(text, strlen(text), "t", &ts, &err), DI_EINVAL);
    assert_null(ts);
    assert_non_null(strstr(err.msg, "line 2: tenant 'alice' again"));
    snprintf(text, sizeof text, "bob %.63s\n", hexa);
    assert_int_equal(srv_tenants_parse(text, strlen(text), "t", &ts, &err), DI_EINVAL);
    assert_non_null(strstr(err.msg, "line 1: expected NAME SHA256-HEX [admin]"));
    snprintf(text, sizeof text, "bob %s root\n", hexa);
    assert_int_equal(srv_tenants_parse(text, strlen(text), "t", &ts, &err), DI_EINVAL);
    snprintf(text, sizeof text, "bob zz%.62s\n", hexa);
    assert_int_equal(srv_tenants_parse(text, strlen(text), "t", &ts, &err), DI_EINVAL);
    assert_non_null(strstr(err.msg, "not hexadecimal"));
    assert_int_equal(srv_tenants_parse("# none\n", 7, "t", &ts, &err), DI_EINVAL);
    assert_non_null(strstr(err.msg, "lists no tenant"));
}

int
main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_defaults),    cmocka_unit_test(test_flags),
        cmocka_unit_test(test_flag_errors), cmocka_unit_test(test_help_version),
        cmocka_unit_test(test_file),        cmocka_unit_test(test_file_errors),
        cmocka_unit_test(test_log_helpers), cmocka_unit_test(test_status_mapping),
        cmocka_unit_test(test_tokens),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}

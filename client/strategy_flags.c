/*
 * strategy_flags.c: the strategy flags of strategy_flags.h, handed to the
 * library's option table one by one.
 */
#include "strategy_flags.h"

#include <stdio.h>
#include <string.h>

#include "cli.h"

int
cli_strategy_flag(int argc, char **argv, int *i, strategy *s)
{
    const char *arg = argv[*i], *eq, *value = NULL;
    char name[32];
    size_t n;
    int arity;
    di_error err;
    if (strncmp(arg, "--", 2) != 0)
        return 0;
    eq = strchr(arg + 2, '=');
    n = eq ? (size_t)(eq - arg - 2) : strlen(arg + 2);
    if (n >= sizeof name)
        return 0;
    memcpy(name, arg + 2, n);
    name[n] = '\0';
    if ((arity = strategy_option_arity(name)) < 0)
        return 0;
    if (arity == 0 && eq) {
        cli_error("option '--%s' takes no value", name);
        return -1;
    }
    if (arity == 1 && eq) {
        value = eq + 1;
    } else if (arity == 1) {
        if (*i + 1 >= argc) {
            cli_error("option '--%s' needs a value", name);
            return -1;
        }
        value = argv[++*i];
    }
    di_error_clear(&err);
    if (strategy_set(s, name, value, &err) != 0) {
        cli_error("%s", err.msg);
        return -1;
    }
    return 1;
}

int
cli_strategy_finish(strategy *s)
{
    di_error err;
    di_error_clear(&err);
    if (strategy_normalize(s, &err) != 0) {
        cli_error("%s", err.msg);
        return -1;
    }
    return 0;
}

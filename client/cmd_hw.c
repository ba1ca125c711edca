/*
 * cmd_hw.c: `distir hw`, a look at the hardware models. `hw list` prints the
 * presets with a one-line summary each; `hw show PRESET|FILE.json` prints a
 * model as JSON in the form hw_from_json reads back (docs/hardware.md);
 * `hw hash PRESET|FILE.json` prints the model's content hash (the part of a
 * cache key that the hardware contributes).
 */
#include <stdio.h>
#include <string.h>

#include "cli.h"
#include "sim/hw.h"

#define HW_USAGE "hw list | hw show PRESET[:N]|FILE.json | hw hash PRESET[:N]|FILE.json"

static int
hw_list(void)
{
    const char *const *names = hw_preset_names();
    for (size_t i = 0; names[i]; i++) {
        hw_model *hw;
        di_error err;
        const hw_device *d;
        double f16;
        if (hw_preset(names[i], &hw, &err) != 0) {
            cli_error("cannot build preset '%s': %s", names[i], err.msg);
            return CLI_FAIL;
        }
        d = &hw->device;
        f16 = d->flops[IR_F16];
        printf("%-15s %u x %u %s, %.4g TFLOP/s f16, %.4g TFLOP/s f32, %.4g GiB at %.4g GB/s, "
               "intra-node %.4g GB/s, inter-node %.4g GB/s per device\n",
               names[i], hw->num_nodes, hw->devices_per_node, d->kind, f16 / 1e12,
               d->flops[IR_F32] / 1e12, d->memory_bytes / 1073741824.0, d->memory_bandwidth / 1e9,
               hw->intra_node.bandwidth / 1e9, hw->inter_node.bandwidth / 1e9);
        hw_free(hw);
    }
    printf("append :N for N nodes of 8 (distir-classic:N: N devices, one per node)\n");
    return CLI_OK;
}

static int
hw_show(const char *what, int hash_only)
{
    hw_model *hw;
    di_error err;
    di_error_clear(&err);
    if (hw_load(what, &hw, &err) != 0) {
        /* The message names the file or the preset already. */
        cli_error("%s", err.msg);
        return CLI_FAIL;
    }
    if (hash_only) {
        di_hash h;
        char hex[65];
        hw_hash(hw, &h);
        di_hash_hex(&h, hex);
        printf("%s\n", hex);
    } else {
        char *json = hw_to_json(hw);
        fputs(json, stdout);
        di_free(json);
    }
    hw_free(hw);
    if (fflush(stdout) != 0) {
        cli_error("cannot write the output");
        return CLI_FAIL;
    }
    return CLI_OK;
}

int
cmd_hw(int argc, char **argv)
{
    if (argc < 2)
        return cli_usage(HW_USAGE);
    if (strcmp(argv[1], "list") == 0) {
        if (argc != 2)
            return cli_usage(HW_USAGE);
        return hw_list();
    }
    if (strcmp(argv[1], "show") == 0 || strcmp(argv[1], "hash") == 0) {
        if (argc != 3)
            return cli_usage(HW_USAGE);
        return hw_show(argv[2], strcmp(argv[1], "hash") == 0);
    }
    if (cli_is_help(argv[1]))
        return cli_help(HW_USAGE);
    cli_error("unknown hw command '%s'", argv[1]);
    return cli_usage(HW_USAGE);
}

/*
 * commands.h: the table of subcommands, X(name, summary). Each line has its
 * cmd_NAME in client/cmd_*.c; `distir --help` lists them in this order.
 */
#define CLI_COMMANDS(X)                                                                            \
    X(print, "print a module in text form (--stats for counts and FLOPs)")                        \
    X(verify, "check a module and print every problem")                                           \
    X(hash, "print a module's canonical SHA-256")                                                 \
    X(convert, "convert a module between text (.dir) and protobuf (.pb)")                         \
    X(import, "import an ONNX model as IR text")                                                  \
    X(model, "generate a built-in model (mlp, gpt)")                                              \
    X(run, "execute a module on the CPU with real numbers")                                       \
    X(transform, "apply a parallel strategy and write the distributed module")                    \
    X(shard, "propagate sharding annotations (global view) and lower them to devices")            \
    X(simulate, "predict step time and memory of a module on hardware")                           \
    X(search, "search the strategies of a module on N devices for the best (in-process)")         \
    X(baseline, "set a CI baseline: a module's result under a name (--server or --db)")           \
    X(compare, "compare a module with a baseline or another module; exit 1 on regression")        \
    X(history, "list a baseline's history, or draw it as an SVG chart")                           \
    X(validate, "compare predictions with measured training runs (a CSV of runs)")                \
    X(calibrate, "fit the hardware's host overhead to measured training runs")                    \
    X(hw, "show hardware presets and files")                                                      \
    X(info, "print the daemon's ServerInfo")

/*
 * commands.h: the table of subcommands, X(name, summary). A command without
 * its cmd_NAME.c yet answers "not available in this build" (weak default in
 * main.c).
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
    X(simulate, "predict step time and memory of a module on hardware")                           \
    X(search, "search the strategy space")                                                        \
    X(baseline, "store a named baseline on the daemon")                                           \
    X(compare, "compare against a stored baseline (CI regression check)")                         \
    X(history, "list the stored results of a baseline")                                           \
    X(hw, "show hardware presets and files")                                                      \
    X(calibrate, "fit the cost model to measured runs")                                           \
    X(validate, "compare predictions with measured runs")                                         \
    X(info, "print the daemon's ServerInfo")

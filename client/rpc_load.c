/*
 * rpc_load.c: rpc.h for the CLI, forwarding to the gRPC client in
 * distir-rpc.so (rpc.c), which is opened on the first call. A command that
 * never talks to a daemon therefore never loads gRPC and its 50-odd shared
 * libraries (docs/cli.md: a local `distir simulate` starts in a couple of
 * milliseconds). The library is looked for at $DISTIR_RPC_LIB, next to the
 * executable (the build directory), then in ../lib/distir/ from it (an
 * installed tree).
 */
#include <dlfcn.h>
#include <limits.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "base/grpc_status.h"
#include "base/pb.h"
#include "rpc_impl.h"

/*
 * What distir-rpc.so takes from this executable (nm -u on rpc.c's object):
 * referenced here so that the static link keeps them whether or not the rest
 * of the CLI uses them. A missing one fails the first --server call loudly
 * ("undefined symbol"), which every daemon test makes.
 */
typedef void (*any_fn)(void);
static const any_fn exported_fns[] = {
    (any_fn)di_error_prefix,
    (any_fn)di_error_set,
    (any_fn)di_free,
    (any_fn)di_read_text,
    (any_fn)di_grpc_status_name,
    (any_fn)pb_unpack_checked,
    (any_fn)protobuf_c_message_free_unpacked,
    (any_fn)protobuf_c_message_get_packed_size,
    (any_fn)protobuf_c_message_pack,
};
static const ProtobufCMessageDescriptor *const exported_descriptors[] = {
    &distir__v1__search_event__descriptor,
    &distir__v1__server_info_reply__descriptor,
    &distir__v1__server_info_request__descriptor,
    &distir__v1__simulate_reply__descriptor,
};

static void *lib;
static int (*f_simulate)(const char *, const Distir__V1__SimulateRequest *, int,
                         Distir__V1__SimulateReply **, di_error *);
static int (*f_server_info)(const char *, int, Distir__V1__ServerInfoReply **, di_error *);
static int (*f_search)(const char *, const Distir__V1__SearchRequest *, int, rpc_search_event_fn,
                       void *, di_error *);
static int (*f_call)(const char *, const char *, const ProtobufCMessage *,
                     const ProtobufCMessageDescriptor *, int, ProtobufCMessage **, di_error *);

/* Opens the library once; 0, or DI_EIO with err naming what was tried. */
static int
load(di_error *err)
{
    char exe[PATH_MAX], dir[PATH_MAX], paths[3][PATH_MAX + 32], why[512] = "";
    int n = 0;
    if (lib != NULL)
        return 0;
    for (size_t i = 0; i < sizeof exported_fns / sizeof exported_fns[0]; i++)
        if (exported_fns[i] == NULL)
            return di_error_set(err, DI_EINTERNAL, "a function for distir-rpc.so is missing");
    for (size_t i = 0; i < sizeof exported_descriptors / sizeof exported_descriptors[0]; i++)
        if (exported_descriptors[i] == NULL)
            return di_error_set(err, DI_EINTERNAL, "a descriptor for distir-rpc.so is missing");
    const char *env = getenv("DISTIR_RPC_LIB");
    if (env != NULL && env[0] != '\0')
        snprintf(paths[n++], sizeof paths[0], "%s", env);
    ssize_t len = readlink("/proc/self/exe", exe, sizeof exe - 1);
    if (len > 0) {
        exe[len] = '\0';
        snprintf(dir, sizeof dir, "%s", exe);
        char *slash = strrchr(dir, '/');
        if (slash != NULL)
            *slash = '\0';
        snprintf(paths[n++], sizeof paths[0], "%s/distir-rpc.so", dir);
        snprintf(paths[n++], sizeof paths[0], "%s/../lib/distir/distir-rpc.so", dir);
    }
    for (int i = 0; i < n && lib == NULL; i++) {
        lib = dlopen(paths[i], RTLD_NOW | RTLD_LOCAL);
        if (lib == NULL && why[0] == '\0') {
            const char *e = dlerror();
            snprintf(why, sizeof why, "%s", e ? e : paths[i]);
        }
    }
    if (lib == NULL)
        return di_error_set(err, DI_EIO,
                            "cannot load the RPC client distir-rpc.so (%s); set DISTIR_RPC_LIB",
                            why);
    *(void **)&f_simulate = dlsym(lib, "rpc_impl_simulate");
    *(void **)&f_server_info = dlsym(lib, "rpc_impl_server_info");
    *(void **)&f_search = dlsym(lib, "rpc_impl_search");
    *(void **)&f_call = dlsym(lib, "rpc_impl_call");
    if (!f_simulate || !f_server_info || !f_search || !f_call) {
        dlclose(lib);
        lib = NULL;
        return di_error_set(err, DI_EIO, "distir-rpc.so lacks the rpc_impl_ functions");
    }
    return 0;
}

int
rpc_simulate(const char *server, const Distir__V1__SimulateRequest *req, int timeout_ms,
             Distir__V1__SimulateReply **reply, di_error *err)
{
    *reply = NULL;
    return load(err) ? DI_EIO : f_simulate(server, req, timeout_ms, reply, err);
}

int
rpc_server_info(const char *server, int timeout_ms, Distir__V1__ServerInfoReply **reply,
                di_error *err)
{
    *reply = NULL;
    return load(err) ? DI_EIO : f_server_info(server, timeout_ms, reply, err);
}

int
rpc_search(const char *server, const Distir__V1__SearchRequest *req, int timeout_ms,
           rpc_search_event_fn on_event, void *ctx, di_error *err)
{
    return load(err) ? DI_EIO : f_search(server, req, timeout_ms, on_event, ctx, err);
}

int
rpc_call(const char *server, const char *method, const ProtobufCMessage *req,
         const ProtobufCMessageDescriptor *reply_desc, int timeout_ms, ProtobufCMessage **reply,
         di_error *err)
{
    *reply = NULL;
    return load(err) ? DI_EIO : f_call(server, method, req, reply_desc, timeout_ms, reply, err);
}

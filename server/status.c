/*
 * status.c: DI_E* -> gRPC status codes, the only place this mapping lives.
 * Input problems (syntax, decoding, verification, impossible strategies) are
 * the client's to fix: INVALID_ARGUMENT. Exceeded limits: RESOURCE_EXHAUSTED.
 * What distir does not support (a module a transform cannot distribute):
 * UNIMPLEMENTED. A stored result that fails its checksum: DATA_LOSS. Our own
 * failures: INTERNAL.
 */
#include "status.h"

#include "base/base.h"
#include "base/grpc_status.h"

grpc_status_code
srv_status_from_code(int di_code)
{
    switch (di_code) {
    case DI_OK:
        return GRPC_STATUS_OK;
    case DI_EINVAL:
    case DI_EPARSE:
    case DI_EVERIFY:
    case DI_EDECODE:
    case DI_ETOODEEP:
    case DI_ESTRATEGY:
    case DI_ECOST:
        return GRPC_STATUS_INVALID_ARGUMENT;
    case DI_ETOOBIG:
    case DI_ENOMEM:
        return GRPC_STATUS_RESOURCE_EXHAUSTED;
    case DI_EUNSUPPORTED:
        return GRPC_STATUS_UNIMPLEMENTED;
    case DI_ENOTFOUND:
        return GRPC_STATUS_NOT_FOUND;
    case DI_ECANCELLED:
        return GRPC_STATUS_CANCELLED;
    case DI_EEXISTS:
        return GRPC_STATUS_ALREADY_EXISTS;
    case DI_EIO:
        return GRPC_STATUS_UNAVAILABLE;
    case DI_ECORRUPT:
        return GRPC_STATUS_DATA_LOSS;
    case DI_EINTERNAL:
    default:
        return GRPC_STATUS_INTERNAL;
    }
}

const char *
srv_status_name(grpc_status_code s)
{
    return di_grpc_status_name((int)s);
}

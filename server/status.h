/*
 * status.h: the one mapping from distir's DI_E* error codes to gRPC status
 * codes (docs/daemon.md: malformed input is INVALID_ARGUMENT, limits are
 * RESOURCE_EXHAUSTED, ...). Every status distird sends for a library error
 * goes through srv_status_from_code.
 */
#ifndef DISTIRD_STATUS_H
#define DISTIRD_STATUS_H

#include <grpc/status.h>

grpc_status_code srv_status_from_code(int di_code);
/* "INVALID_ARGUMENT" etc.; "UNKNOWN_STATUS" for values outside the enum (di_grpc_status_name). */
const char *srv_status_name(grpc_status_code s);

#endif

/*
 * grpc_status.h: the names of gRPC status codes ("INVALID_ARGUMENT"), as
 * plain ints, for the CLI and the daemon alike. The codes are fixed by the
 * gRPC protocol (0 OK to 16 UNAUTHENTICATED), so the library needs no gRPC
 * header to name them. Which DI_E* code becomes which status is the
 * daemon's to decide, in one place of distird.
 */
#ifndef DISTIR_GRPC_STATUS_H
#define DISTIR_GRPC_STATUS_H

/* "INVALID_ARGUMENT" etc.; "UNKNOWN_STATUS" for values outside 0..16. */
const char *di_grpc_status_name(int status);

#endif

/*
 * auth.c: who may call distird, and what each caller may see.
 *
 * Tokens (--tokens FILE): one tenant per line, "NAME SHA256 [admin]", where
 * SHA256 is the hex SHA-256 of the tenant's bearer token (the file never
 * holds a token itself: `printf %s "$TOKEN" | sha256sum`); '#' starts a
 * comment. With a token file every call but health checks must carry
 * "authorization: Bearer TOKEN" metadata naming a listed token, else it
 * ends UNAUTHENTICATED. The file is read at start and again on SIGHUP.
 *
 * Tenants: each tenant's stored results and searches live under keys
 * scoped by its name (SHA-256 of a domain, the name and the result's key),
 * so one tenant can neither read another's result by key nor tell from a
 * hit or a miss whether another simulated a model. Clients see the
 * unscoped key, the same for everyone, and GetResult scopes what they send.
 * --shared-cache makes every tenant share one scope (a cache as useful as
 * it can be, among tenants who trust each other). Without a token file
 * there is one anonymous tenant and keys are not scoped at all.
 *
 * TLS (--tls-cert, --tls-key, optional --tls-client-ca and
 * --tls-require-client-cert): gRPC core's SSL server credentials with a
 * certificate config fetcher, so that SIGHUP loads the files again and new
 * handshakes use them.
 */
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "daemon.h"
#include "log.h"
#include "tokens.h"

#define TENANT_DOMAIN "distir.tenant.v1"

int
srv_tenants_load(const char *path, srv_tenants **out, di_error *err)
{
    uint8_t *text;
    size_t len;
    *out = NULL;
    if (di_read_file(path, (size_t)1 << 24, &text, &len, err) != 0) {
        di_error_prefix(err, "--tokens");
        return err ? err->code : DI_EIO;
    }
    int rc = srv_tenants_parse((const char *)text, len, path, out, err);
    di_free(text);
    return rc;
}

int
srv_auth_call(srv_daemon *d, const grpc_metadata_array *md, srv_identity *who)
{
    static const char bearer[] = "Bearer ";
    memset(who, 0, sizeof *who);
    who->admin = 1;
    if (d->tenants == NULL)
        return 0; /* no token file: one anonymous tenant, unscoped */
    who->admin = 0;
    for (size_t i = 0; i < md->count; i++) {
        const grpc_metadata *m = &md->metadata[i];
        if (grpc_slice_str_cmp(m->key, "authorization") != 0)
            continue;
        size_t len = GRPC_SLICE_LENGTH(m->value);
        const char *v = (const char *)GRPC_SLICE_START_PTR(m->value);
        if (len <= sizeof bearer - 1 || memcmp(v, bearer, sizeof bearer - 1) != 0)
            return -1;
        di_hash h;
        di_sha256_once(v + sizeof bearer - 1, len - (sizeof bearer - 1), &h);
        const srv_tenant *t = srv_tenants_find(d->tenants, &h);
        if (t == NULL)
            return -1;
        who->authenticated = 1;
        who->admin = t->admin;
        snprintf(who->tenant, sizeof who->tenant, "%s", t->name);
        if (!d->cfg->shared_cache) {
            di_sha256 s;
            di_sha256_init(&s);
            di_sha256_update(&s, TENANT_DOMAIN, sizeof TENANT_DOMAIN);
            di_sha256_update(&s, t->name, strlen(t->name) + 1);
            di_sha256_final(&s, &who->scope);
            who->scoped = 1;
        }
        return 0;
    }
    return -1;
}

void
srv_scope_key(const srv_identity *who, const di_hash *key, di_hash *out)
{
    if (who == NULL || !who->scoped) {
        *out = *key;
        return;
    }
    di_sha256 s;
    di_sha256_init(&s);
    di_sha256_update(&s, who->scope.b, sizeof who->scope.b);
    di_sha256_update(&s, key->b, sizeof key->b);
    di_sha256_final(&s, out);
}

/* ---------------------------------------------------------------- TLS */

struct srv_tls {
    pthread_mutex_t lock;
    grpc_ssl_server_certificate_config *pending; /* for the next handshake's fetch */
    char *cert, *key, *client_ca;
};

#define PEM_MAX ((size_t)1 << 24) /* bytes of a PEM file */

/* A certificate config from the files, or NULL with err set. */
static grpc_ssl_server_certificate_config *
load_config(const srv_config *cfg, di_error *err)
{
    char *cert = di_read_text(cfg->tls_cert, PEM_MAX, "--tls-cert", err);
    char *key = cert ? di_read_text(cfg->tls_key, PEM_MAX, "--tls-key", err) : NULL;
    char *ca = NULL;
    grpc_ssl_server_certificate_config *c = NULL;
    if (key != NULL && cfg->tls_client_ca[0] != '\0')
        ca = di_read_text(cfg->tls_client_ca, PEM_MAX, "--tls-client-ca", err);
    if (key != NULL && (cfg->tls_client_ca[0] == '\0' || ca != NULL)) {
        if (strstr(cert, "-----BEGIN CERTIFICATE-----") == NULL)
            di_error_set(err, DI_EINVAL, "--tls-cert: '%s' holds no PEM certificate",
                         cfg->tls_cert);
        else if (strstr(key, "PRIVATE KEY-----") == NULL)
            di_error_set(err, DI_EINVAL, "--tls-key: '%s' holds no PEM private key", cfg->tls_key);
        else if (ca != NULL && strstr(ca, "-----BEGIN CERTIFICATE-----") == NULL)
            di_error_set(err, DI_EINVAL, "--tls-client-ca: '%s' holds no PEM certificate",
                         cfg->tls_client_ca);
        else {
            grpc_ssl_pem_key_cert_pair pair = {key, cert};
            /*
             * gRPC 1.51's config fetcher asserts a root bundle even when no
             * client certificate is requested: the server's own certificate
             * stands in then, unused.
             */
            c = grpc_ssl_server_certificate_config_create(ca ? ca : cert, &pair, 1);
        }
    }
    di_free(cert);
    di_free(key);
    di_free(ca);
    return c;
}

static grpc_ssl_certificate_config_reload_status
fetch_config(void *user_data, grpc_ssl_server_certificate_config **config)
{
    srv_tls *tls = user_data;
    grpc_ssl_certificate_config_reload_status st = GRPC_SSL_CERTIFICATE_CONFIG_RELOAD_UNCHANGED;
    pthread_mutex_lock(&tls->lock);
    if (tls->pending != NULL) {
        *config = tls->pending; /* gRPC owns it from here */
        tls->pending = NULL;
        st = GRPC_SSL_CERTIFICATE_CONFIG_RELOAD_NEW;
    }
    pthread_mutex_unlock(&tls->lock);
    return st;
}

int
srv_tls_new(const srv_config *cfg, srv_tls **out, grpc_server_credentials **creds, di_error *err)
{
    grpc_ssl_server_certificate_config *first = load_config(cfg, err);
    grpc_ssl_client_certificate_request_type req;
    *out = NULL;
    *creds = NULL;
    if (first == NULL)
        return err ? err->code : DI_EINVAL;
    srv_tls *tls = di_xcalloc(1, sizeof *tls);
    pthread_mutex_init(&tls->lock, NULL);
    tls->pending = first;
    if (cfg->tls_client_ca[0] == '\0')
        req = GRPC_SSL_DONT_REQUEST_CLIENT_CERTIFICATE;
    else if (cfg->tls_require_client_cert)
        req = GRPC_SSL_REQUEST_AND_REQUIRE_CLIENT_CERTIFICATE_AND_VERIFY;
    else
        req = GRPC_SSL_REQUEST_CLIENT_CERTIFICATE_AND_VERIFY;
    grpc_ssl_server_credentials_options *o =
        grpc_ssl_server_credentials_create_options_using_config_fetcher(req, fetch_config, tls);
    *creds = grpc_ssl_server_credentials_create_with_options(o);
    if (*creds == NULL) {
        srv_tls_free(tls);
        return di_error_set(err, DI_EINVAL, "TLS: gRPC refused the certificate configuration");
    }
    *out = tls;
    return 0;
}

int
srv_tls_reload(srv_tls *tls, const srv_config *cfg, di_error *err)
{
    grpc_ssl_server_certificate_config *c = load_config(cfg, err);
    if (c == NULL)
        return err ? err->code : DI_EINVAL;
    pthread_mutex_lock(&tls->lock);
    if (tls->pending != NULL)
        grpc_ssl_server_certificate_config_destroy(tls->pending);
    tls->pending = c;
    pthread_mutex_unlock(&tls->lock);
    return 0;
}

void
srv_tls_free(srv_tls *tls)
{
    if (tls == NULL)
        return;
    if (tls->pending != NULL)
        grpc_ssl_server_certificate_config_destroy(tls->pending);
    pthread_mutex_destroy(&tls->lock);
    di_free(tls);
}

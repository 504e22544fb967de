/*
 * Wicket's native fast path for nginx's OpenResty path (nginx-compat/README.md, "The native fast
 * path"; issue #42).
 *
 * lua/wicket.lua decides a fan's first request in nginx's worker (the admission token, its holder,
 * the edge's confirmation of the session) and, when it passes, remembers the pass for the
 * request's credentials (`$wicket_key`: Cookie, Authorization, the user id header, the client
 * address and the path). Entering Lua costs a request about 2,000 instructions before any of
 * wicket.lua's code runs (a coroutine, its context, the code cache), twice for a request nginx
 * redirects internally (an index file): more than the rest of what nginx does for it. This module
 * keeps those passes in C and answers the repeated request itself:
 *
 * - `wicket_native on;` (a guarded location, nginx-compat/wicket-native-protect.conf): a gate put in
 *   place of Lua's access handler in nginx's phase engine when a worker starts looks the request's
 *   credentials up among the passes lua/wicket.lua remembered, checks the pass's end, the
 *   session's confirmation by the edge and the freshness of the edge's config exactly as
 *   wicket.lua's own fast path does, and on a hit sets `$wicket_pass` (what the origin is told)
 *   and does not enter Lua; on anything else Lua decides as before. nginx's other access checks
 *   of the location (allow/deny, auth_basic, auth_request) run before it, as before Lua's.
 * - the origin's `Wicket-Revoke: 1` in a guarded location: the admission cookie cleared, this
 *   worker's confirmation of the session dropped at once, and the revoke queued for wicket.lua,
 *   which tells the edge and the other workers within 50 ms (instead of a Lua header filter run for
 *   every response).
 * - `$wicket_native_room`, `_user`, `_device`, `_position`, `_cookie`, `_authorization`: the lines
 *   of `$wicket_pass` (set by Lua or here), read without a regular expression.
 *
 * The state is per worker and written only by wicket.lua through LuaJIT's FFI (nginx loads dynamic
 * modules RTLD_GLOBAL, so `ffi.C` finds the functions below): what passes here is exactly what
 * wicket.lua would pass on its own fast path, one table lookup sooner.
 */

#include <ngx_config.h>
#include <ngx_core.h>
#include <ngx_http.h>
#include <dlfcn.h>


typedef struct {
    ngx_flag_t   enable;
} wn_loc_conf_t;


/* An edge's confirmation of a session ("room sub ip user device"), until `till` (ms). */
typedef struct wn_conf_s  wn_conf_t;

struct wn_conf_s {
    wn_conf_t   *next;
    wn_conf_t   *all_next;  /* every confirmation, for the sweep */
    wn_conf_t  **all_prev;
    uint64_t     hash;
    uint64_t     till;
    uint64_t     seen;      /* the last request passed here (ms) */
    ngx_uint_t   refs;      /* passes pointing here */
    size_t       len;
    u_char       key[1];
};


/* A pass wicket.lua remembered for a request's credentials (`$wicket_key`). */
typedef struct wn_pass_s  wn_pass_t;

struct wn_pass_s {
    wn_pass_t   *next;
    uint64_t     hash;
    uint64_t     till;      /* the token's end and its leeway (ms) */
    wn_conf_t   *conf;
    ngx_uint_t   refs;      /* 1 while in a table, +1 per request using `pass` */
    size_t       key_len;
    size_t       pass_len;
    u_char      *pass;      /* `$wicket_pass`: after the key */
    u_char       key[1];
};


/* One generation of passes; two are kept, as wicket.lua's own fast path keeps them. */
typedef struct {
    wn_pass_t  **buckets;
    ngx_uint_t   mask;
    ngx_uint_t   n;
} wn_gen_t;


/* A revoke for wicket.lua to deliver: the request's fields, as wicket_native_revoke_t. */
#define WN_REVOKE_FIELDS  8
#define WN_REVOKES_MAX    1024

typedef struct {
    size_t       len;
    u_char      *data;
} wn_str_t;

typedef struct {
    wn_str_t     f[WN_REVOKE_FIELDS];
} wicket_native_revoke_t;


static ngx_int_t wn_gate(ngx_http_request_t *r);
static ngx_int_t wn_header_filter(ngx_http_request_t *r);
static ngx_int_t wn_field_variable(ngx_http_request_t *r,
    ngx_http_variable_value_t *v, uintptr_t data);
static ngx_int_t wn_passed_variable(ngx_http_request_t *r,
    ngx_http_variable_value_t *v, uintptr_t data);
static ngx_int_t wn_odd_target_variable(ngx_http_request_t *r,
    ngx_http_variable_value_t *v, uintptr_t data);
static ngx_int_t wn_add_variables(ngx_conf_t *cf);
static ngx_int_t wn_init(ngx_conf_t *cf);
static ngx_int_t wn_init_process(ngx_cycle_t *cycle);
static void *wn_create_loc_conf(ngx_conf_t *cf);
static char *wn_merge_loc_conf(ngx_conf_t *cf, void *parent, void *child);
static char *wn_native(ngx_conf_t *cf, ngx_command_t *cmd, void *conf);


static ngx_command_t  wn_commands[] = {

    { ngx_string("wicket_native"),
      NGX_HTTP_LOC_CONF|NGX_CONF_FLAG,
      wn_native,
      NGX_HTTP_LOC_CONF_OFFSET,
      offsetof(wn_loc_conf_t, enable),
      NULL },

      ngx_null_command
};


static ngx_http_module_t  wn_module_ctx = {
    wn_add_variables,                      /* preconfiguration */
    wn_init,                               /* postconfiguration */
    NULL,                                  /* create main configuration */
    NULL,                                  /* init main configuration */
    NULL,                                  /* create server configuration */
    NULL,                                  /* merge server configuration */
    wn_create_loc_conf,                    /* create location configuration */
    wn_merge_loc_conf                      /* merge location configuration */
};


ngx_module_t  ngx_http_wicket_module = {
    NGX_MODULE_V1,
    &wn_module_ctx,                        /* module context */
    wn_commands,                           /* module directives */
    NGX_HTTP_MODULE,                       /* module type */
    NULL,                                  /* init master */
    NULL,                                  /* init module */
    wn_init_process,                       /* init process */
    NULL,                                  /* init thread */
    NULL,                                  /* exit thread */
    NULL,                                  /* exit process */
    NULL,                                  /* exit master */
    NGX_MODULE_V1_PADDING
};


static ngx_http_output_header_filter_pt  ngx_http_next_header_filter;

/* Lua's access handler, behind wn_gate (NULL: not found, nothing gated). */
static ngx_http_handler_pt  wn_lua_access;

/* The variables read (indexes; set by the first `wicket_native on`). */
static ngx_int_t  wn_pass_index = NGX_ERROR;
static ngx_int_t  wn_cookie_index, wn_auth_index, wn_user_index;
static ngx_int_t  wn_request_uri_index, wn_method_index, wn_xff_index, wn_lua_cookie_index;

/* A request's context: its pass when passed here (also after an internal redirect), these markers
 * (an internal redirect of a request wicket.lua passed; Lua's handler entered), or none (not yet
 * at the gate). */
static wn_pass_t  wn_passed_before;
static wn_pass_t  wn_in_lua;

static wn_gen_t    wn_cur, wn_old;
static ngx_uint_t  wn_max;
static wn_conf_t **wn_confs;
static wn_conf_t  *wn_confs_all;
static ngx_uint_t  wn_confs_mask;
static uint64_t    wn_fresh_till;
static uint64_t    wn_seed;

/* The edge's user id header (wicket.lua gives it from the edge's config; empty: none), read from the
 * request's headers instead of `$wicket_user_header`: wicket.lua remembers a pass only when the two
 * agree, so a remembered key holds this header's value. */
static u_char      wn_user_header[128];
static size_t      wn_user_header_len;

static u_char     *wn_revokes[WN_REVOKES_MAX];
static ngx_uint_t  wn_revokes_head, wn_revokes_n;
static u_char     *wn_revoke_taken;
static ngx_uint_t  wn_revokes_dropped;


static ngx_http_variable_t  wn_vars[] = {
    { ngx_string("wicket_native_room"), NULL, wn_field_variable, 0, 0, 0 },
    { ngx_string("wicket_native_user"), NULL, wn_field_variable, 1, 0, 0 },
    { ngx_string("wicket_native_device"), NULL, wn_field_variable, 2, 0, 0 },
    { ngx_string("wicket_native_position"), NULL, wn_field_variable, 3, 0, 0 },
    { ngx_string("wicket_native_cookie"), NULL, wn_field_variable, 4, 0, 0 },
    { ngx_string("wicket_native_authorization"), NULL, wn_field_variable, 5,
      0, 0 },
    { ngx_string("wicket_native_passed"), NULL, wn_passed_variable, 0,
      NGX_HTTP_VAR_NOCACHEABLE, 0 },
    ngx_http_null_variable
};


/* Hashing ------------------------------------------------------------------------------------ */

/* Not a cryptographic hash: only passes wicket.lua verified are ever stored, and a lookup compares
 * the whole key. Two words a step in two lanes (a few instructions per 8 bytes: a Cookie header with
 * an admission token is most of a request's key); a field's last bytes read as two overlapping
 * words (no copy, no loop); the lanes folded once per field and mixed once at the end. */
#define WN_K1  0x9e3779b97f4a7c15ULL
#define WN_K2  0xc2b2ae3d27d4eb4fULL

static ngx_inline uint64_t
wn_load64(const u_char *p)
{
    uint64_t  v;

    ngx_memcpy(&v, p, 8);
    return v;
}


static ngx_inline uint64_t
wn_load32(const u_char *p)
{
    uint32_t  v;

    ngx_memcpy(&v, p, 4);
    return v;
}


static ngx_inline uint64_t
wn_final(uint64_t h)
{
    h ^= h >> 33;
    h *= WN_K2;
    return h ^ (h >> 29);
}


/* `n` bytes at `p` folded into `h` (not yet mixed: wn_final() ends a hash). */
static ngx_inline uint64_t
wn_hash_more(uint64_t h, const u_char *p, size_t n)
{
    uint64_t  a, b, v, w;

    a = h;
    b = h ^ WN_K2 ^ n;

    if (n > 16) {
        do {
            a = (a ^ wn_load64(p)) * WN_K1;
            b = (b ^ wn_load64(p + 8)) * WN_K2;
            p += 16;
            n -= 16;
        } while (n > 16);

        /* The last 1-16 bytes: the field's last 16 (read again in part). */
        p -= 16 - n;
        n = 16;
    }

    if (n >= 8) {
        v = wn_load64(p);
        w = wn_load64(p + n - 8);

    } else if (n >= 4) {
        v = wn_load32(p);
        w = wn_load32(p + n - 4);

    } else if (n > 0) {
        v = p[0] | ((uint64_t) p[n >> 1] << 8) | ((uint64_t) p[n - 1] << 16);
        w = 0;

    } else {
        v = 0;
        w = 0;
    }

    a = (a ^ v) * WN_K1;
    b = (b ^ w) * WN_K2;

    return a ^ (b >> 31) ^ (b << 33);
}


static uint64_t
wn_hash_bytes(uint64_t h, const u_char *p, size_t n)
{
    return wn_final(wn_hash_more(h, p, n));
}


/* The hash of a request's five key fields (wicket-lua-http.conf's `$wicket_key`, split). */
static uint64_t
wn_hash_fields(ngx_str_t *f)
{
    ngx_uint_t  i;
    uint64_t    h;

    h = wn_seed;

    for (i = 0; i < 5; i++) {
        h = wn_hash_more(h, f[i].data, f[i].len);
    }

    return wn_final(h);
}


/* Whether `n` bytes at `a` and `b` are the same: short fields (a user id, an address, a path)
 * compared in two overlapping words, longer ones by memcmp. */
static ngx_inline ngx_int_t
wn_same(const u_char *a, const u_char *b, size_t n)
{
    if (n > 16) {
        return ngx_memcmp(a, b, n) == 0;
    }

    if (n >= 8) {
        return ((wn_load64(a) ^ wn_load64(b)) | (wn_load64(a + n - 8) ^ wn_load64(b + n - 8))) == 0;
    }

    if (n >= 4) {
        return ((wn_load32(a) ^ wn_load32(b)) | (wn_load32(a + n - 4) ^ wn_load32(b + n - 4))) == 0;
    }

    while (n--) {
        if (a[n] != b[n]) {
            return 0;
        }
    }

    return 1;
}


/* Whether a pass's key (the five fields joined by line breaks) is these fields. */
static ngx_int_t
wn_key_is(wn_pass_t *e, ngx_str_t *f)
{
    u_char      *p, *end;
    ngx_uint_t   i;

    p = e->key;
    end = e->key + e->key_len;

    for (i = 0; i < 5; i++) {
        if ((size_t) (end - p) < f[i].len || !wn_same(p, f[i].data, f[i].len)) {
            return 0;
        }

        p += f[i].len;

        if (i < 4) {
            if (p == end || *p != '\n') {
                return 0;
            }

            p++;
        }
    }

    return p == end;
}


/* Splits a `$wicket_key` into its five fields: the path is last, the only one that may hold a
 * line break (a decoded %0A). */
static ngx_int_t
wn_split_key(u_char *key, size_t len, ngx_str_t *f)
{
    u_char      *p, *end, *nl;
    ngx_uint_t   i;

    p = key;
    end = key + len;

    for (i = 0; i < 4; i++) {
        nl = ngx_strlchr(p, end, '\n');
        if (nl == NULL) {
            return NGX_ERROR;
        }

        f[i].data = p;
        f[i].len = nl - p;
        p = nl + 1;
    }

    f[4].data = p;
    f[4].len = end - p;

    return NGX_OK;
}


static uint64_t
wn_now(void)
{
    ngx_time_t  *tp;

    tp = ngx_timeofday();

    return (uint64_t) tp->sec * 1000 + tp->msec;
}


/* Confirmations --------------------------------------------------------------------------- */

static wn_conf_t *
wn_conf_find(const u_char *key, size_t len, uint64_t h)
{
    wn_conf_t  *c;

    for (c = wn_confs[h & wn_confs_mask]; c; c = c->next) {
        if (c->hash == h && c->len == len && ngx_memcmp(c->key, key, len) == 0) {
            return c;
        }
    }

    return NULL;
}


static wn_conf_t *
wn_conf_get(const u_char *key, size_t len)
{
    uint64_t    h;
    wn_conf_t  *c, **bucket;

    h = wn_hash_bytes(wn_seed, key, len);
    c = wn_conf_find(key, len, h);

    if (c) {
        return c;
    }

    c = malloc(sizeof(wn_conf_t) + len);
    if (c == NULL) {
        return NULL;
    }

    c->hash = h;
    c->till = 0;
    c->seen = 0;
    c->refs = 0;
    c->len = len;
    ngx_memcpy(c->key, key, len);

    bucket = &wn_confs[h & wn_confs_mask];
    c->next = *bucket;
    *bucket = c;

    c->all_next = wn_confs_all;
    c->all_prev = &wn_confs_all;
    if (wn_confs_all) {
        wn_confs_all->all_prev = &c->all_next;
    }
    wn_confs_all = c;

    return c;
}


/* Passes ---------------------------------------------------------------------------------- */

static void
wn_pass_unref(wn_pass_t *e)
{
    if (--e->refs > 0) {
        return;
    }

    if (e->conf) {
        e->conf->refs--;
    }

    free(e);
}


static void
wn_request_done(void *data)
{
    wn_pass_unref(data);
}


static void
wn_gen_clear(wn_gen_t *g)
{
    ngx_uint_t   i;
    wn_pass_t   *e, *next;

    for (i = 0; i <= g->mask; i++) {
        for (e = g->buckets[i]; e; e = next) {
            next = e->next;
            wn_pass_unref(e);
        }

        g->buckets[i] = NULL;
    }

    g->n = 0;
}


/* The pass in generation `g` for these fields, unlinked when `unlink`. */
static wn_pass_t *
wn_gen_find(wn_gen_t *g, ngx_str_t *f, uint64_t h, ngx_uint_t unlink)
{
    wn_pass_t  *e, **prev;

    for (prev = &g->buckets[h & g->mask]; (e = *prev); prev = &e->next) {
        if (e->hash == h && wn_key_is(e, f)) {
            if (unlink) {
                *prev = e->next;
                g->n--;
            }

            return e;
        }
    }

    return NULL;
}


/* Puts `e` in the current generation; a full one becomes the old one (the old one's passes go). */
static void
wn_gen_add(wn_pass_t *e)
{
    wn_gen_t    tmp;
    wn_pass_t **bucket;

    if (wn_cur.n >= wn_max) {
        wn_gen_clear(&wn_old);
        tmp = wn_old;
        wn_old = wn_cur;
        wn_cur = tmp;
    }

    bucket = &wn_cur.buckets[e->hash & wn_cur.mask];
    e->next = *bucket;
    *bucket = e;
    wn_cur.n++;
}


static wn_pass_t *
wn_lookup(ngx_str_t *f)
{
    uint64_t    h;
    wn_pass_t  *e;

    h = wn_hash_fields(f);

    e = wn_gen_find(&wn_cur, f, h, 0);
    if (e) {
        return e;
    }

    /* A hit in the old generation moves back: the fans still at it keep their place. */
    e = wn_gen_find(&wn_old, f, h, 1);
    if (e) {
        wn_gen_add(e);
    }

    return e;
}


static ngx_int_t
wn_gen_alloc(wn_gen_t *g, ngx_uint_t size)
{
    g->buckets = calloc(size, sizeof(wn_pass_t *));
    g->mask = size - 1;
    g->n = 0;

    return g->buckets ? NGX_OK : NGX_ERROR;
}


/* The FFI (lua/wicket.lua) ---------------------------------------------------------------- */

int wicket_native_version(void);
int wicket_native_user_header(const u_char *name, size_t len);
int wicket_native_start(unsigned max);
void wicket_native_reset(void);
void wicket_native_fresh(double till_ms);
int wicket_native_remember(const u_char *key, size_t key_len, const u_char *ckey,
    size_t ckey_len, const u_char *pass, size_t pass_len, double till_ms);
int wicket_native_confirm(const u_char *ckey, size_t len, double till_ms);
void wicket_native_unconfirm(const u_char *ckey, size_t len);
double wicket_native_seen(const u_char *ckey, size_t len);
void wicket_native_sweep(double now_ms);
int wicket_native_revoke_take(wicket_native_revoke_t *out);
unsigned wicket_native_revokes_dropped(void);


/* The FFI's version: lua/wicket.lua uses the module only when it knows this one. */
int
wicket_native_version(void)
{
    return 1;
}


/* The edge's user id header (empty: the edge reads no header). 1: taken; 0: too long (no pass is
 * remembered then, see wicket.lua). Passes remembered before are forgotten. */
int
wicket_native_user_header(const u_char *name, size_t len)
{
    wicket_native_reset();

    if (len >= sizeof(wn_user_header)) {
        wn_user_header_len = 0;
        return 0;
    }

    /* Lowercase, as nginx keeps each request header's name beside it (`lowcase_key`). */
    ngx_strlow(wn_user_header, (u_char *) name, len);
    wn_user_header_len = len;

    return 1;
}


/* Makes the worker's tables (once): `max` passes a generation (wicket.lua's decided_max).
 * 1: ready; 0: no memory (wicket.lua then keeps its own fast path alone). */
int
wicket_native_start(unsigned max)
{
    ngx_uint_t  size;

    if (wn_cur.buckets) {
        return 1;
    }

    wn_max = max ? max : 1;

    for (size = 1024; size < 2 * wn_max; size <<= 1) { /* void */ }

    if (wn_gen_alloc(&wn_cur, size) != NGX_OK || wn_gen_alloc(&wn_old, size) != NGX_OK) {
        return 0;
    }

    wn_confs = calloc(size, sizeof(wn_conf_t *));
    if (wn_confs == NULL) {
        return 0;
    }

    wn_confs_mask = size - 1;
    wn_seed = ((uint64_t) ngx_random() << 32) ^ (uint64_t) ngx_random() ^ (uint64_t) ngx_pid;

    return 1;
}


/* Forgets every pass (the edge's config changed: what was passed is checked again). */
void
wicket_native_reset(void)
{
    if (wn_cur.buckets) {
        wn_gen_clear(&wn_cur);
        wn_gen_clear(&wn_old);
    }
}


/* Until when the edge's config wicket.lua pulled last is fresh (ms). */
void
wicket_native_fresh(double till_ms)
{
    wn_fresh_till = till_ms > 0 ? (uint64_t) till_ms : 0;
}


/* Remembers that requests with `key` (`$wicket_key`) pass with `pass` (`$wicket_pass`) until
 * `till_ms`, while the session `ckey` stays confirmed. 1: remembered; 0: not (no memory, a
 * malformed key, or not started). */
int
wicket_native_remember(const u_char *key, size_t key_len, const u_char *ckey, size_t ckey_len,
    const u_char *pass, size_t pass_len, double till_ms)
{
    ngx_str_t   f[5];
    uint64_t    h;
    wn_conf_t  *c;
    wn_pass_t  *e, *old;

    if (wn_cur.buckets == NULL) {
        return 0;
    }

    e = malloc(sizeof(wn_pass_t) + key_len + pass_len);
    if (e == NULL) {
        return 0;
    }

    ngx_memcpy(e->key, key, key_len);
    e->key_len = key_len;
    e->pass = e->key + key_len;
    ngx_memcpy(e->pass, pass, pass_len);
    e->pass_len = pass_len;
    e->till = till_ms > 0 ? (uint64_t) till_ms : 0;
    e->refs = 1;

    if (wn_split_key(e->key, key_len, f) != NGX_OK) {
        free(e);
        return 0;
    }

    c = wn_conf_get(ckey, ckey_len);
    if (c == NULL) {
        free(e);
        return 0;
    }

    e->conf = c;
    c->refs++;

    h = wn_hash_fields(f);
    e->hash = h;

    old = wn_gen_find(&wn_cur, f, h, 1);
    if (old == NULL) {
        old = wn_gen_find(&wn_old, f, h, 1);
    }

    if (old) {
        wn_pass_unref(old);
    }

    wn_gen_add(e);

    return 1;
}


/* The edge confirmed session `ckey` until `till_ms`. */
int
wicket_native_confirm(const u_char *ckey, size_t len, double till_ms)
{
    wn_conf_t  *c;

    if (wn_confs == NULL) {
        return 0;
    }

    c = wn_conf_get(ckey, len);
    if (c == NULL) {
        return 0;
    }

    c->till = till_ms > 0 ? (uint64_t) till_ms : 0;

    return 1;
}


/* Session `ckey` is not (or no longer) confirmed: nothing of it passes here. */
void
wicket_native_unconfirm(const u_char *ckey, size_t len)
{
    wn_conf_t  *c;

    if (wn_confs == NULL) {
        return;
    }

    c = wn_conf_find(ckey, len, wn_hash_bytes(wn_seed, ckey, len));
    if (c) {
        c->till = 0;
    }
}


/* When this worker last passed a request of session `ckey` here (ms; 0: never). */
double
wicket_native_seen(const u_char *ckey, size_t len)
{
    wn_conf_t  *c;

    if (wn_confs == NULL) {
        return 0;
    }

    c = wn_conf_find(ckey, len, wn_hash_bytes(wn_seed, ckey, len));

    return c ? (double) c->seen : 0;
}


/* Drops the confirmations that ran out and that no pass points to (each report): a walk over the
 * confirmations, not the table. */
void
wicket_native_sweep(double now_ms)
{
    uint64_t    now;
    wn_conf_t  *c, *next, **prev;

    now = now_ms > 0 ? (uint64_t) now_ms : 0;

    for (c = wn_confs_all; c; c = next) {
        next = c->all_next;

        if (c->refs > 0 || c->till > now) {
            continue;
        }

        for (prev = &wn_confs[c->hash & wn_confs_mask]; *prev != c; prev = &(*prev)->next) {
            /* void */
        }

        *prev = c->next;

        *c->all_prev = c->all_next;
        if (c->all_next) {
            c->all_next->all_prev = c->all_prev;
        }

        free(c);
    }
}


/* The oldest revoke waiting, its fields in `out` (valid until the next call); 0: none. */
int
wicket_native_revoke_take(wicket_native_revoke_t *out)
{
    u_char      *rec;

    free(wn_revoke_taken);
    wn_revoke_taken = NULL;

    if (wn_revokes_n == 0) {
        return 0;
    }

    rec = wn_revokes[wn_revokes_head];
    wn_revokes[wn_revokes_head] = NULL;
    wn_revokes_head = (wn_revokes_head + 1) % WN_REVOKES_MAX;
    wn_revokes_n--;

    ngx_memcpy(out, rec, sizeof(wicket_native_revoke_t));
    wn_revoke_taken = rec;

    return 1;
}


/* Revokes dropped because WN_REVOKES_MAX waited (wicket.lua logs them). */
unsigned
wicket_native_revokes_dropped(void)
{
    unsigned  n;

    n = (unsigned) wn_revokes_dropped;
    wn_revokes_dropped = 0;

    return n;
}


/* The request path ---------------------------------------------------------------------------- */

static ngx_int_t
wn_var(ngx_http_request_t *r, ngx_int_t index, ngx_str_t *s)
{
    ngx_http_variable_value_t  *v;

    v = ngx_http_get_indexed_variable(r, index);

    if (v == NULL) {
        return NGX_ERROR;
    }

    if (v->not_found) {
        s->len = 0;
        s->data = (u_char *) "";

    } else {
        s->len = v->len;
        s->data = v->data;
    }

    return NGX_OK;
}


/* The first value of the request's header `name`, or "" (as `$http_...` reads it). */
static void
wn_header(ngx_http_request_t *r, u_char *name, size_t len, ngx_str_t *out)
{
    ngx_uint_t        i;
    ngx_list_part_t  *part;
    ngx_table_elt_t  *h;

    out->len = 0;
    out->data = (u_char *) "";

    if (len == 0) {
        return;
    }

    part = &r->headers_in.headers.part;
    h = part->elts;

    for (i = 0; /* void */; i++) {
        if (i >= part->nelts) {
            if (part->next == NULL) {
                return;
            }

            part = part->next;
            h = part->elts;
            i = 0;
        }

        if (h[i].key.len == len
            && (h[i].lowcase_key ? wn_same(h[i].lowcase_key, name, len)
                                 : ngx_strncasecmp(h[i].key.data, name, len) == 0))
        {
            *out = h[i].value;
            return;
        }
    }
}


/* The request's key fields, as `$wicket_key` has them for a request whose pass wicket.lua could
 * remember. */
static ngx_int_t
wn_fields(ngx_http_request_t *r, ngx_str_t *f)
{
    /* `$http_cookie`: one Cookie header's value as it is (nginx joins several with "; "). */
#if (nginx_version >= 1023000)
    if (r->headers_in.cookie == NULL) {
        f[0].len = 0;
        f[0].data = (u_char *) "";

    } else if (r->headers_in.cookie->next == NULL) {
        f[0] = r->headers_in.cookie->value;

    } else if (wn_var(r, wn_cookie_index, &f[0]) != NGX_OK) {
        return NGX_ERROR;
    }
#else
    if (r->headers_in.cookies.nelts == 0) {
        f[0].len = 0;
        f[0].data = (u_char *) "";

    } else if (r->headers_in.cookies.nelts == 1) {
        f[0] = ((ngx_table_elt_t **) r->headers_in.cookies.elts)[0]->value;

    } else if (wn_var(r, wn_cookie_index, &f[0]) != NGX_OK) {
        return NGX_ERROR;
    }
#endif

    /* `$http_authorization`, without the walk over the headers nginx does for it: nginx keeps the
     * one Authorization header a request may have (a second is a 400). */
    if (r->headers_in.authorization) {
        f[1] = r->headers_in.authorization->value;

    } else {
        f[1].len = 0;
        f[1].data = (u_char *) "";
    }

    wn_header(r, wn_user_header, wn_user_header_len, &f[2]);

    f[3] = r->connection->addr_text;
    f[4] = r->uri;

    return NGX_OK;
}


/* The pass of a pool cleanup this module added to the request (nginx clears the modules' contexts
 * on an internal redirect; the request's pool and its cleanups stay). */
static wn_pass_t *
wn_pass_kept(ngx_http_request_t *r)
{
    ngx_pool_cleanup_t  *cln;

    for (cln = r->pool->cleanup; cln; cln = cln->next) {
        if (cln->handler == wn_request_done) {
            return cln->data;
        }
    }

    return NULL;
}


/* Whether the request passes here: its pass, `wn_passed_before` (an internal redirect of a request
 * wicket.lua passed), or NULL (wicket.lua decides). */
static wn_pass_t *
wn_passes(ngx_http_request_t *r)
{
    uint64_t                    now;
    ngx_str_t                   f[5], pass;
    wn_pass_t                  *e;
    wn_loc_conf_t              *lcf;
    ngx_pool_cleanup_t         *cln;
    ngx_http_variable_value_t  *vv;

    lcf = ngx_http_get_module_loc_conf(r, ngx_http_wicket_module);

    if (!lcf->enable || wn_cur.buckets == NULL) {
        return NULL;
    }

    if (r->internal) {
        /* An internal redirect (an index file, try_files) of a request passed a moment ago passes
         * again with what was found, as wicket.lua's access() has it. */
        e = wn_pass_kept(r);
        if (e != NULL) {
            return e;
        }

        if (wn_var(r, wn_pass_index, &pass) == NGX_OK && pass.len > 0) {
            return &wn_passed_before;
        }

        return NULL;
    }

    now = wn_now();

    if (wn_fresh_till <= now || wn_fields(r, f) != NGX_OK) {
        return NULL;
    }

    e = wn_lookup(f);

    if (e == NULL || e->till <= now || e->conf->till <= now) {
        return NULL;
    }

    /* The pass's `$wicket_pass` stays the request's until it ends, whatever wicket.lua forgets
     * meanwhile. */
    cln = ngx_pool_cleanup_add(r->pool, 0);
    if (cln == NULL) {
        return NULL;
    }

    e->refs++;
    cln->handler = wn_request_done;
    cln->data = e;
    e->conf->seen = now;

    vv = &r->variables[wn_pass_index];
    vv->len = e->pass_len;
    vv->data = e->pass;
    vv->valid = 1;
    vv->no_cacheable = 0;
    vv->not_found = 0;

    return e;
}


/* In place of Lua's access handler (after nginx's own access checks of the location): a request
 * passed here does not enter Lua. Lua's handler may be called again for the same request (to
 * resume after I/O): the first call's answer is kept in the context. */
static ngx_int_t
wn_gate(ngx_http_request_t *r)
{
    wn_pass_t  *e;

    e = ngx_http_get_module_ctx(r, ngx_http_wicket_module);

    if (e == NULL) {
        e = wn_passes(r);

        if (e == NULL) {
            e = &wn_in_lua;
        }

        ngx_http_set_ctx(r, e, ngx_http_wicket_module);
    }

    if (e != &wn_in_lua) {
        return NGX_DECLINED;
    }

    return wn_lua_access(r);
}


/* Line `n` of `$wicket_pass` (0: the room ... 5: Authorization). */
static ngx_int_t
wn_pass_line(ngx_http_request_t *r, uintptr_t n, ngx_str_t *out)
{
    u_char     *p, *end, *nl;
    ngx_str_t   pass;
    uintptr_t   i;

    if (wn_pass_index == NGX_ERROR || wn_var(r, wn_pass_index, &pass) != NGX_OK
        || pass.len == 0)
    {
        return NGX_DECLINED;
    }

    p = pass.data;
    end = pass.data + pass.len;

    for (i = 0; i < n; i++) {
        nl = ngx_strlchr(p, end, '\n');
        if (nl == NULL) {
            return NGX_DECLINED;
        }

        p = nl + 1;
    }

    nl = ngx_strlchr(p, end, '\n');

    if (n == 5 && nl != NULL) {
        return NGX_DECLINED;
    }

    out->data = p;
    out->len = (nl ? nl : end) - p;

    return NGX_OK;
}


static ngx_int_t
wn_field_variable(ngx_http_request_t *r, ngx_http_variable_value_t *v, uintptr_t data)
{
    ngx_str_t  s;

    if (wn_pass_line(r, data, &s) != NGX_OK) {
        v->not_found = 1;
        return NGX_OK;
    }

    v->len = s.len;
    v->data = s.data;
    v->valid = 1;
    v->no_cacheable = 1;
    v->not_found = 0;

    return NGX_OK;
}


/* "1" when the module passed the request (Lua's access handler did not run for it, nor for the
 * request it was redirected from), else "". */
static ngx_int_t
wn_passed_variable(ngx_http_request_t *r, ngx_http_variable_value_t *v, uintptr_t data)
{
    wn_pass_t  *ctx;

    v->valid = 1;
    v->no_cacheable = 1;
    v->not_found = 0;

    /* (Only with the gate in front of Lua's access handler: without it Lua ran all the same.) */
    ctx = ngx_http_get_module_ctx(r, ngx_http_wicket_module);

    if (wn_lua_access != NULL && ctx != NULL && ctx->conf != NULL) {
        v->len = 1;
        v->data = (u_char *) "1";

    } else {
        v->len = 0;
        v->data = (u_char *) "";
    }

    return NGX_OK;
}


/* wicket-http.conf's `$wicket_odd_target` without a regular expression: "1" when the request target's
 * path (before the first `?`) holds `;`, `\`, `#`, `%5C`, `%2F`, `%7F` or `%00`-`%1F` (either case),
 * else "" — the map's `~^[^?]*(?:;|\x5C|%5[cC]|%2[fF]|%[01][0-9a-fA-F]|%7[fF]|#)`. */
static ngx_int_t
wn_odd_target_variable(ngx_http_request_t *r, ngx_http_variable_value_t *v, uintptr_t data)
{
    u_char  *p, *end, a, b;

    v->valid = 1;
    v->no_cacheable = 0;
    v->not_found = 0;
    v->len = 0;
    v->data = (u_char *) "";

    p = r->unparsed_uri.data;
    end = p + r->unparsed_uri.len;

    for ( /* void */ ; p < end && *p != '?'; p++) {
        if (*p == ';' || *p == '\\' || *p == '#') {
            break;
        }

        if (*p != '%' || end - p < 3) {
            continue;
        }

        a = p[1];
        b = p[2];

        if (b >= 'A' && b <= 'Z') {
            b |= 0x20;
        }

        if ((a == '5' && b == 'c') || (a == '2' && b == 'f') || (a == '7' && b == 'f')
            || ((a == '0' || a == '1') && ((b >= '0' && b <= '9') || (b >= 'a' && b <= 'f'))))
        {
            break;
        }
    }

    if (p < end && *p != '?') {
        v->len = 1;
        v->data = (u_char *) "1";
    }

    return NGX_OK;
}


/* Whether the origin answered `Wicket-Revoke: 1`. */
static ngx_int_t
wn_revoked(ngx_http_request_t *r)
{
    ngx_uint_t        i;
    ngx_list_part_t  *part;
    ngx_table_elt_t  *h;

    part = &r->upstream->headers_in.headers.part;
    h = part->elts;

    for (i = 0; /* void */; i++) {
        if (i >= part->nelts) {
            if (part->next == NULL) {
                return 0;
            }

            part = part->next;
            h = part->elts;
            i = 0;
        }

        if (h[i].hash != 0 && h[i].key.len == sizeof("Wicket-Revoke") - 1
            && ngx_strncasecmp(h[i].key.data, (u_char *) "Wicket-Revoke", h[i].key.len) == 0)
        {
            return h[i].value.len == 1 && h[i].value.data[0] == '1';
        }
    }
}


/* Queues the revoke of this request's session for wicket.lua: the path, the target, the method,
 * X-Forwarded-For, Cookie, Authorization, the user id header and the client address. */
static void
wn_queue_revoke(ngx_http_request_t *r)
{
    u_char                  *rec, *p;
    size_t                   size;
    ngx_str_t                f[WN_REVOKE_FIELDS];
    ngx_uint_t               i;
    wicket_native_revoke_t  *out;

    ngx_memzero(f, sizeof(f));
    f[0] = r->uri;
    (void) wn_var(r, wn_request_uri_index, &f[1]);
    (void) wn_var(r, wn_method_index, &f[2]);
    (void) wn_var(r, wn_xff_index, &f[3]);
    (void) wn_var(r, wn_cookie_index, &f[4]);
    (void) wn_var(r, wn_auth_index, &f[5]);
    (void) wn_var(r, wn_user_index, &f[6]);
    f[7] = r->connection->addr_text;

    if (wn_revokes_n == WN_REVOKES_MAX) {
        wn_revokes_dropped++;
        return;
    }

    size = sizeof(wicket_native_revoke_t);
    for (i = 0; i < WN_REVOKE_FIELDS; i++) {
        size += f[i].len;
    }

    rec = malloc(size);
    if (rec == NULL) {
        wn_revokes_dropped++;
        return;
    }

    out = (wicket_native_revoke_t *) rec;
    p = rec + sizeof(wicket_native_revoke_t);

    for (i = 0; i < WN_REVOKE_FIELDS; i++) {
        out->f[i].len = f[i].len;
        out->f[i].data = p;
        p = ngx_cpymem(p, f[i].data, f[i].len);
    }

    wn_revokes[(wn_revokes_head + wn_revokes_n) % WN_REVOKES_MAX] = rec;
    wn_revokes_n++;
}


/* Adds header `name: value` to the answer. */
static ngx_int_t
wn_add_header(ngx_http_request_t *r, const char *name, ngx_str_t *value)
{
    ngx_table_elt_t  *h;

    h = ngx_list_push(&r->headers_out.headers);
    if (h == NULL) {
        return NGX_ERROR;
    }

    h->hash = 1;
    h->key.data = (u_char *) name;
    h->key.len = ngx_strlen(name);
    h->value = *value;

    return NGX_OK;
}


static ngx_int_t
wn_header_filter(ngx_http_request_t *r)
{
    u_char           *p;
    ngx_str_t         room, cookie;
    wn_pass_t        *e;
    wn_loc_conf_t    *lcf;
    ngx_table_elt_t  *h;

    if (r != r->main) {
        return ngx_http_next_header_filter(r);
    }

    lcf = ngx_http_get_module_loc_conf(r, ngx_http_wicket_module);

    if (!lcf->enable) {
        return ngx_http_next_header_filter(r);
    }

    /* The cookie the edge set for the client when it decided the request (`$wicket_lua_cookie`),
     * for the answers `add_header` would add it to: one variable read instead of `add_header`'s
     * script on every answer. */
    e = ngx_http_get_module_ctx(r, ngx_http_wicket_module);

    if ((e == NULL || e->conf == NULL)   /* (passed here: Lua set nothing) */
        && wn_var(r, wn_lua_cookie_index, &cookie) == NGX_OK && cookie.len > 0)
    {
        switch (r->headers_out.status) {
        case NGX_HTTP_OK:
        case NGX_HTTP_CREATED:
        case NGX_HTTP_NO_CONTENT:
        case NGX_HTTP_PARTIAL_CONTENT:
        case NGX_HTTP_MOVED_PERMANENTLY:
        case NGX_HTTP_MOVED_TEMPORARILY:
        case NGX_HTTP_SEE_OTHER:
        case NGX_HTTP_NOT_MODIFIED:
        case NGX_HTTP_TEMPORARY_REDIRECT:
        case NGX_HTTP_PERMANENT_REDIRECT:
            if (wn_add_header(r, "Set-Cookie", &cookie) != NGX_OK) {
                return NGX_ERROR;
            }
            break;

        default:
            break;
        }
    }

    if (r->upstream == NULL || !wn_revoked(r) || wn_pass_line(r, 0, &room) != NGX_OK
        || room.len == 0)
    {
        return ngx_http_next_header_filter(r);
    }

    h = ngx_list_push(&r->headers_out.headers);
    if (h == NULL) {
        return NGX_ERROR;
    }

    p = ngx_pnalloc(r->pool, room.len + sizeof("wicket_a_=; Path=/; Max-Age=0; HttpOnly; SameSite=Lax"));
    if (p == NULL) {
        return NGX_ERROR;
    }

    h->hash = 1;
    ngx_str_set(&h->key, "Set-Cookie");
    h->value.data = p;
    p = ngx_cpymem(p, "wicket_a_", sizeof("wicket_a_") - 1);
    p = ngx_cpymem(p, room.data, room.len);
    p = ngx_cpymem(p, "=; Path=/; Max-Age=0; HttpOnly; SameSite=Lax",
                   sizeof("=; Path=/; Max-Age=0; HttpOnly; SameSite=Lax") - 1);
    h->value.len = p - h->value.data;

    /* This worker stops passing the session at once; wicket.lua tells the edge and the other
     * workers (it finds the session from the request's fields when it was not passed here). */
    if (e != NULL && e->conf != NULL) {
        e->conf->till = 0;
    }

    wn_queue_revoke(r);

    return ngx_http_next_header_filter(r);
}


/* Configuration ----------------------------------------------------------------------------- */

static ngx_int_t
wn_add_variables(ngx_conf_t *cf)
{
    ngx_http_variable_t  *var, *v;

    /* A new configuration (nginx started, or reloaded): its variables are indexed anew by the first
     * `wicket_native on` (the previous configuration's indexes name other variables). */
    wn_pass_index = NGX_ERROR;

    for (v = wn_vars; v->name.len; v++) {
        var = ngx_http_add_variable(cf, &v->name, v->flags);
        if (var == NULL) {
            return NGX_ERROR;
        }

        var->get_handler = v->get_handler;
        var->data = v->data;
    }

    return NGX_OK;
}


static ngx_int_t
wn_index(ngx_conf_t *cf, const char *name)
{
    ngx_str_t  s;

    s.data = (u_char *) name;
    s.len = ngx_strlen(name);

    return ngx_http_get_variable_index(cf, &s);
}


/* `wicket_native on|off`: on needs wicket.conf's `$wicket_pass` and wicket-lua-http.conf's
 * `$wicket_user_header` (nginx names a missing one when it starts). */
static char *
wn_native(ngx_conf_t *cf, ngx_command_t *cmd, void *conf)
{
    char  *rv;

    rv = ngx_conf_set_flag_slot(cf, cmd, conf);
    if (rv != NGX_CONF_OK) {
        return rv;
    }

    if (wn_pass_index == NGX_ERROR) {
        wn_pass_index = wn_index(cf, "wicket_pass");
        wn_cookie_index = wn_index(cf, "http_cookie");
        wn_auth_index = wn_index(cf, "http_authorization");
        wn_user_index = wn_index(cf, "wicket_user_header");
        wn_request_uri_index = wn_index(cf, "request_uri");
        wn_method_index = wn_index(cf, "request_method");
        wn_xff_index = wn_index(cf, "proxy_add_x_forwarded_for");
        wn_lua_cookie_index = wn_index(cf, "wicket_lua_cookie");

        if (wn_pass_index == NGX_ERROR || wn_cookie_index == NGX_ERROR
            || wn_auth_index == NGX_ERROR || wn_user_index == NGX_ERROR
            || wn_request_uri_index == NGX_ERROR || wn_method_index == NGX_ERROR
            || wn_xff_index == NGX_ERROR || wn_lua_cookie_index == NGX_ERROR)
        {
            wn_pass_index = NGX_ERROR;
            return "cannot index Wicket's variables";
        }
    }

    return NGX_CONF_OK;
}


static ngx_int_t
wn_init(ngx_conf_t *cf)
{
    ngx_http_core_main_conf_t  *cmcf;

    cmcf = ngx_http_conf_get_module_main_conf(cf, ngx_http_core_module);

    ngx_http_next_header_filter = ngx_http_top_header_filter;
    ngx_http_top_header_filter = wn_header_filter;

    /* With the native path in use, wicket-http.conf's `$wicket_odd_target` map (a regular expression
     * over every request's target, twice as much as the rest of the path costs) is answered here. */
    if (wn_pass_index != NGX_ERROR && cmcf->variables_keys != NULL) {
        ngx_uint_t            i;
        ngx_hash_key_t       *key;
        ngx_http_variable_t  *v;

        key = cmcf->variables_keys->keys.elts;

        for (i = 0; i < cmcf->variables_keys->keys.nelts; i++) {
            if (key[i].key.len == sizeof("wicket_odd_target") - 1
                && ngx_strncmp(key[i].key.data, "wicket_odd_target", key[i].key.len) == 0)
            {
                v = key[i].value;
                v->get_handler = wn_odd_target_variable;
                v->data = 0;
            }
        }
    }

    return NGX_OK;
}


/* Puts wn_gate in place of Lua's access handler in the worker's phase engine. Lua moves its handler
 * to the end of the access phase on its first request (after allow/deny and auth_basic), the gate
 * with it: no pass exists before wicket.lua's first access() in the worker, so none is taken
 * before the move. */
static ngx_int_t
wn_init_process(ngx_cycle_t *cycle)
{
    ngx_uint_t                  i, gated;
    ngx_http_handler_pt         lua;
    ngx_http_phase_handler_t   *ph;
    ngx_http_core_main_conf_t  *cmcf;

    if (wn_pass_index == NGX_ERROR || ngx_http_cycle_get_module_main_conf(cycle, ngx_http_core_module) == NULL) {
        return NGX_OK;
    }

    cmcf = ngx_http_cycle_get_module_main_conf(cycle, ngx_http_core_module);
    lua = (ngx_http_handler_pt) dlsym(RTLD_DEFAULT, "ngx_http_lua_access_handler");

    if (lua == NULL) {
        ngx_log_error(NGX_LOG_WARN, cycle->log, 0,
                      "wicket_native: the lua module's access handler is not loaded: "
                      "nothing passes natively");
        return NGX_OK;
    }

    gated = 0;
    ph = cmcf->phase_engine.handlers;

    for (i = 0; ph[i].checker; i++) {
        if (ph[i].checker == ngx_http_core_access_phase && ph[i].handler == lua) {
            ph[i].handler = wn_gate;
            gated++;
        }
    }

    if (gated == 0) {
        ngx_log_error(NGX_LOG_WARN, cycle->log, 0,
                      "wicket_native: no access_by_lua found to pass requests by");
        return NGX_OK;
    }

    wn_lua_access = lua;

    return NGX_OK;
}


static void *
wn_create_loc_conf(ngx_conf_t *cf)
{
    wn_loc_conf_t  *conf;

    conf = ngx_pcalloc(cf->pool, sizeof(wn_loc_conf_t));
    if (conf == NULL) {
        return NULL;
    }

    conf->enable = NGX_CONF_UNSET;

    return conf;
}


static char *
wn_merge_loc_conf(ngx_conf_t *cf, void *parent, void *child)
{
    wn_loc_conf_t  *prev = parent;
    wn_loc_conf_t  *conf = child;

    ngx_conf_merge_value(conf->enable, prev->enable, 0);

    return NGX_CONF_OK;
}

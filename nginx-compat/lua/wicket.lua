-- Wicket's admission check inside nginx's own worker (OpenResty / Debian's libnginx-mod-http-lua):
-- a fan who holds a valid admission token passes without a subrequest to the edge; everything
-- else — no token, a token this file cannot vouch for, the queue, joins, refusals — is the edge's,
-- asked exactly as nginx-compat/wicket-protect.conf asks it (the `/_wicket_auth` subrequest, then
-- `@wicket` for a refusal; `/_wicket_auth_fresh`, past nginx's cache, when the answer is to confirm
-- a session). See nginx-compat/README.md "The OpenResty path".
--
-- Used from nginx (wicket-lua-http.conf, wicket-lua-protect.conf):
--   init_by_lua_block        { require("wicket").configure{ edge = "127.0.0.1:8080", secret = "...",
--                                keys = { ["hs-1"] = { alg = "HS256", secret = "..." } } } }
--   init_worker_by_lua_block { require("wicket").start() }
--   access_by_lua_block      { require("wicket").access() }      -- in each guarded location
--   header_filter_by_lua_block { require("wicket").header_filter() }
-- with wicket-lua-http.conf's `$wicket_key` (the path, client address, Authorization, user header
-- and Cookie in one string, built when this file reads it) and `$wicket_pass` (what the origin is
-- told, split by wicket-lua-http.conf's maps only when a request is proxied).
--
-- A request passes here, in nginx, only when all of these hold; otherwise the edge decides it:
--   1. the edge's config is fresh (pulled within 3 report intervals);
--   2. the path (nginx's normalised $uri) is under a protected prefix of a room that is neither
--      turning everyone away nor in test mode, and under no prefix the edge keeps for itself (a
--      limit or a bot check covers it, or it is the core's, the queue's or the edge's own);
--   3. the room's admission token (cookie `wicket_a_<room>`, else `Authorization: Bearer`) passes
--      the edge's own checks: typ `admission+jwt`, no `crit`, a known kid and its alg (HS256 or
--      EdDSA) and signature, iss, aud (the event), room, sub 1-256 bytes, jti >= 16 bytes,
--      iat/nbf/exp with the edge's leeway and a lifetime of at most 300 s;
--   4. the request carries a device cookie the edge signed (`wicket_d`), and the token's `sub` is
--      that device or the request's user id (the holder);
--   5. the edge confirmed this session for this client address, user and device within the
--      last two report intervals: by passing a request of it (the subrequest), or in its answer to
--      the last report. Each interval nginx reports the sessions it passed in the last `idle`
--      seconds; the edge answers which still run, touches them, and refuses blocked addresses,
--      users and devices.
-- So a revoked or expired session, or a new block, stops passing here within two intervals (2 s
-- by default), and nothing passes here that the edge would refuse.

local ffi = require "ffi"
local cjson = require "cjson.safe"
local lrucache = require "resty.lrucache"
local b64 = require "ngx.base64"

local C = ffi.C
local ngx = ngx
local ngx_var = ngx.var
local ngx_req = ngx.req
local byte, find, sub, gsub = string.byte, string.find, string.sub, string.gsub

ffi.cdef [[
typedef struct bio_st BIO;
typedef struct evp_pkey_st EVP_PKEY;
typedef struct evp_md_ctx_st EVP_MD_CTX;
const void *EVP_sha256(void);
unsigned char *HMAC(const void *md, const void *key, int key_len, const unsigned char *d, size_t n,
                    unsigned char *out, unsigned int *out_len);
int CRYPTO_memcmp(const void *a, const void *b, size_t len);
BIO *BIO_new_mem_buf(const void *buf, int len);
void BIO_free(BIO *b);
EVP_PKEY *PEM_read_bio_PUBKEY(BIO *bp, EVP_PKEY **x, void *cb, void *u);
EVP_MD_CTX *EVP_MD_CTX_new(void);
int EVP_DigestVerifyInit(EVP_MD_CTX *ctx, void **pctx, const void *type, void *e, EVP_PKEY *pkey);
int EVP_DigestVerify(EVP_MD_CTX *ctx, const unsigned char *sig, size_t siglen,
                     const unsigned char *tbs, size_t tbslen);
]]

-- The native fast path (nginx-compat/native, `load_module ngx_http_wicket_module.so`): when nginx
-- has it, every pass, confirmation and freshness below is mirrored into it, and a location with
-- `wicket_native on` (wicket-native-protect.conf) passes a remembered request without entering Lua.
ffi.cdef [[
typedef struct { size_t len; const unsigned char *data; } wicket_native_str_t;
typedef struct { wicket_native_str_t f[8]; } wicket_native_revoke_t;
int wicket_native_version(void);
int wicket_native_user_header(const char *name, size_t len);
int wicket_native_start(unsigned max);
void wicket_native_reset(void);
void wicket_native_fresh(double till_ms);
int wicket_native_remember(const char *key, size_t key_len, const char *ckey, size_t ckey_len,
                           const char *pass, size_t pass_len, double till_ms);
int wicket_native_confirm(const char *ckey, size_t len, double till_ms);
void wicket_native_unconfirm(const char *ckey, size_t len);
double wicket_native_seen(const char *ckey, size_t len);
void wicket_native_sweep(double now_ms);
int wicket_native_revoke_take(wicket_native_revoke_t *out);
unsigned wicket_native_revokes_dropped(void);
]]

local _M = {}

-- What configure() was given (nginx's config: keys and the edge's secret never leave nginx).
local cfg = {
    edge_host = "127.0.0.1",
    edge_port = 8080,
    issuer = "wicket",
    leeway = 5,            -- [tokens] leeway-seconds (at most 10, as the edge)
    interval = 1,          -- seconds between reports; a confirmation lasts two
    dict = "wicket_lua",   -- lua_shared_dict holding the confirmations
    verified_max = 50000,  -- tokens remembered as verified per worker
    decided_max = 20000,   -- requests' credentials remembered as passed per worker (twice that at most)
    seen_max = 50000,      -- sessions a worker reports at most
    idle = 30,             -- seconds a session is still reported after its last request here
    report_bytes = 12288,  -- largest report body: below the edge's max-body-bytes (default 16 KiB)
}
local keys = {}            -- kid -> { alg = "HS256", secret = s } | { alg = "EdDSA", pkey = EVP_PKEY* }
local device_key           -- HMAC key of the edge's device cookie MAC (from [edge] secret)

-- Pulled from the edge (per worker): protected prefixes, the edge's own prefixes, the user id.
-- `fresh_till`: when the config pulled last goes stale (three intervals after it came); `sig`: the
-- config as one string (a change empties the fast path).
local state = { protected = {}, edge_only = {}, at = 0, fresh_till = 0, sig = "" }
local verified             -- lrucache: token .. " " .. room -> claims
-- The fast path (per worker): nginx's `$wicket_key` — everything a check reads of the request, the
-- path last (only it can hold a line break, a decoded %0A, so two requests that differ never share
-- a key) — -> { ckey (the confirmation's key), pass (`$wicket_pass`), till (the token's end) }. A
-- fan's next request with the same credentials costs one variable read, one clock read, three
-- table lookups and one variable set. Two generations: when the
-- current one is full it becomes the old one (a hit there moves back), so the fans still at it keep
-- their place and memory stays under twice `decided_max`. Emptied when the edge's config changes.
local passed, passed_n, passed_old = {}, 0, {}
-- The confirmations this worker knows of: "room sub ip user device" -> until when (the shared dict
-- holds the same, so a session another worker confirmed is found there once; reports renew both).
local confirmed = {}
local seen = {}            -- "room sub ip user device" -> when nginx last passed a request of it
local seen_n = 0

local hmac_out = ffi.new("unsigned char[32]")
local hmac_len = ffi.new("unsigned int[1]")
local md_ctx               -- one EVP_MD_CTX per worker, re-initialised for each EdDSA check
local dict                 -- the shared dict of the confirmations (all workers see them)
local native               -- the native fast path's functions (ffi.C) when nginx loaded it, else nil

local function hmac(key, data)
    C.HMAC(C.EVP_sha256(), key, #key, data, #data, hmac_out, hmac_len)
    return ffi.string(hmac_out, hmac_len[0])
end

local function equal(a, b)
    return #a == #b and C.CRYPTO_memcmp(a, b, #a) == 0
end

local function read_file(path)
    local f = assert(io.open(path, "rb"))
    local text = f:read("*a")
    f:close()
    return text
end

--- configure{ edge = "host:port", secret = edge secret | secret_file = path, keys = { [kid] =
--- { alg = "HS256", secret = s | secret_file = path } | { alg = "EdDSA", public_key_file = path } },
--- issuer = "wicket", leeway = 5, interval = 1, dict = "wicket_lua" }. In init_by_lua.
function _M.configure(opts)
    local host, port = string.match(opts.edge or "", "^([%w%.%-]+):(%d+)$")
    assert(host, "wicket: edge must be host:port")
    cfg.edge_host, cfg.edge_port = host, tonumber(port)
    for _, k in ipairs({ "issuer", "leeway", "interval", "dict", "verified_max", "decided_max", "seen_max", "idle", "report_bytes" }) do
        if opts[k] ~= nil then cfg[k] = opts[k] end
    end
    assert(cfg.leeway <= 10, "wicket: leeway is at most 10 s")
    local secret = opts.secret or (opts.secret_file and gsub(read_file(opts.secret_file), "%s+$", ""))
    assert(secret and #secret > 0, "wicket: the edge's [edge] secret is needed (device cookies)")
    -- identity.rs Signer::new: key = HMAC("wicket-edge-v1", secret).
    device_key = hmac("wicket-edge-v1", secret)
    for kid, k in pairs(opts.keys or {}) do
        if k.alg == "HS256" then
            local s = k.secret or (k.secret_file and gsub(read_file(k.secret_file), "%s+$", ""))
            assert(s and #s >= 32, "wicket: HS256 key " .. kid .. " needs a secret of 32+ characters")
            keys[kid] = { alg = "HS256", secret = s }
        elseif k.alg == "EdDSA" then
            local pem = read_file(k.public_key_file)
            local bio = C.BIO_new_mem_buf(pem, #pem)
            local pkey = C.PEM_read_bio_PUBKEY(bio, nil, nil, nil)
            C.BIO_free(bio)
            assert(pkey ~= nil, "wicket: " .. k.public_key_file .. " is not a public key in PEM")
            keys[kid] = { alg = "EdDSA", pkey = pkey }
        else
            error("wicket: key " .. kid .. ": alg must be HS256 or EdDSA")
        end
    end
end

-- JWT ------------------------------------------------------------------------------------------

local function is_uint(v)
    return type(v) == "number" and v >= 0 and v == math.floor(v) and v < 2 ^ 53
end

local function signature_ok(key, input, sig)
    if key.alg == "HS256" then
        return equal(hmac(key.secret, input), sig)
    end
    if #sig ~= 64 or C.EVP_DigestVerifyInit(md_ctx, nil, nil, nil, key.pkey) ~= 1 then
        return false
    end
    return C.EVP_DigestVerify(md_ctx, sig, #sig, input, #input) == 1
end

-- The claims of `token` when the edge would accept it for `rule` (admission.rs verify_full); nil
-- otherwise. Stricter is safe: a token refused here goes to the edge, which decides.
local function verify_token(token, rule, now)
    if #token == 0 or #token > 4096 then return nil end
    local d1 = find(token, ".", 1, true)
    local d2 = d1 and find(token, ".", d1 + 1, true)
    if not d2 or find(token, ".", d2 + 1, true) then return nil end
    local head = cjson.decode(b64.decode_base64url(sub(token, 1, d1 - 1)) or "")
    if type(head) ~= "table" or head.typ ~= "admission+jwt" or head.crit ~= nil then return nil end
    local key = type(head.kid) == "string" and keys[head.kid]
    if not key or head.alg ~= key.alg then return nil end
    local sig = b64.decode_base64url(sub(token, d2 + 1))
    if not sig or not signature_ok(key, sub(token, 1, d2 - 1), sig) then return nil end
    local c = cjson.decode(b64.decode_base64url(sub(token, d1 + 1, d2 - 1)) or "")
    if type(c) ~= "table" then return nil end
    if c.iss ~= cfg.issuer or c.room ~= rule.room or type(c.sub) ~= "string" or type(c.jti) ~= "string" then return nil end
    local aud_ok = c.aud == rule.event
    if type(c.aud) == "table" then
        for _, a in ipairs(c.aud) do aud_ok = aud_ok or a == rule.event end
    end
    if not aud_ok or #c.sub == 0 or #c.sub > 256 or #c.jti < 16 then return nil end
    if not (is_uint(c.iat) and is_uint(c.exp) and is_uint(c.nbf) and is_uint(c.pos)) then return nil end
    local leeway = cfg.leeway
    if c.exp + leeway <= now or c.nbf > now + leeway or c.iat > now + leeway then return nil end
    if c.exp <= c.iat or c.exp - c.iat > 300 then return nil end
    return { sub = c.sub, pos = c.pos, exp = c.exp }
end

-- The request ------------------------------------------------------------------------------------

-- The first `name=value` of the Cookie headers (identity.rs `cookie`: trimmed, quotes dropped).
local function cookie(cookies, name)
    if not cookies then return nil end
    for pair in string.gmatch(cookies, "[^;]+") do
        local eq = find(pair, "=", 1, true)
        if eq and gsub(sub(pair, 1, eq - 1), "^%s*(.-)%s*$", "%1") == name then
            return (gsub(gsub(sub(pair, eq + 1), "^%s*(.-)%s*$", "%1"), '^"*(.-)"*$', "%1"))
        end
    end
    return nil
end

-- The device id of a cookie the edge signed (identity.rs DeviceIds::verify), or nil.
local function device_of(value)
    if not value or #value ~= 45 or byte(value, 23) ~= 46 then return nil end
    local id, tag = sub(value, 1, 22), b64.decode_base64url(sub(value, 24))
    if not tag or #tag ~= 16 then return nil end
    return equal(sub(hmac(device_key, "device\0" .. id), 1, 16), tag) and id or nil
end

-- The edge's user id header of this request (its first value), or nil.
local function user_header_value()
    if not state.user_var then return nil end
    local raw = ngx_var[state.user_var]
    if type(raw) == "table" then raw = raw[1] end
    return raw
end

-- The user id as the edge reads it (identity.rs UserSource::user) from the user id header's value
-- `raw` (nil: none) and the cookies, or nil.
local function user_of(raw, cookies)
    if raw == nil and state.user_cookie then raw = cookie(cookies, state.user_cookie) end
    if raw == nil or #raw == 0 or #raw > 128 or find(raw, "[^\33-\126]") then return nil end
    return raw
end

local function starts(s, prefix)
    return find(s, prefix, 1, true) == 1
end

-- The protected rule for `path` (longest prefix) when nginx may decide it here, else nil.
local function local_rule(path)
    if ngx.now() - state.at > 3 * cfg.interval then return nil end
    for _, p in ipairs(state.edge_only) do
        if starts(path, p) then return nil end
    end
    local best
    for _, r in ipairs(state.protected) do
        if starts(path, r.path) and (not best or #r.path > #best.path) then best = r end
    end
    return best and best.is_local and best or nil
end

-- Records that the edge passed session `key` (for two intervals), here and in the shared dict.
local function confirm(key)
    local till = ngx.now() + 2 * cfg.interval
    confirmed[key] = till
    dict:set("c " .. key, till, 2 * cfg.interval)
    if native then native.wicket_native_confirm(key, #key, till * 1000) end
end

-- Until when session `key` is confirmed (this worker's record, else the shared dict's), or nil.
local function confirmed_till(key, now)
    local till = confirmed[key]
    if till == nil or till <= now then
        till = dict:get("c " .. key)
        if type(till) ~= "number" or till <= now then
            confirmed[key] = nil
            return nil
        end
        confirmed[key] = till
        if native then native.wicket_native_confirm(key, #key, till * 1000) end
    end
    return till
end

-- Drops the confirmation of session `key` here and in the shared dict.
local function unconfirm(key)
    confirmed[key] = nil
    dict:delete("c " .. key)
    if native then native.wicket_native_unconfirm(key, #key) end
end

local function confirmation_key(room, subject, ip, user, device)
    return room .. " " .. subject .. " " .. ip .. " " .. (user or "") .. " " .. device
end

local function remember_seen(key, now)
    if seen[key] then
        seen[key] = now
    elseif seen_n < cfg.seen_max then
        seen[key] = now
        seen_n = seen_n + 1
    end
end

-- What the origin gets of the client's credentials once admitted to `room` (decide.rs
-- upstream_credentials): the cookies without `wicket_a_<room>`, no bearer Authorization.
local function forward_credentials(cookies, auth, room)
    local kept = {}
    if cookies then
        local name = "wicket_a_" .. room .. "="
        for c in string.gmatch(cookies, "[^;]+") do
            c = gsub(c, "^%s*(.-)%s*$", "%1")
            if #c > 0 and not starts(c, name) then kept[#kept + 1] = c end
        end
    end
    return table.concat(kept, "; "), (auth and not starts(auth, "Bearer ")) and auth or ""
end

-- `$wicket_pass`: the origin's Wicket-Room, Wicket-User, Wicket-Device, Wicket-Position, Cookie and
-- Authorization, one per line (wicket-lua-http.conf's maps split it). None can hold a line break:
-- nginx refuses one in a request header, and the edge's answer is a header too.
local function pass_value(user, device, room, position, fwd_cookie, fwd_auth)
    return room .. "\n" .. user .. "\n" .. device .. "\n" .. position .. "\n" .. fwd_cookie .. "\n" .. fwd_auth
end

-- The edge decides (wicket-protect.conf's path): its 2xx passes with its identity and cookie, its
-- 401/403 hands the request to @wicket, anything else is a 500 (as auth_request). True when the
-- edge passed `session` itself (confirmed from now on).
local function ask_edge(session)
    -- A pass that is to confirm a session must be the edge's answer of now, not a cached one.
    local res = ngx.location.capture(session and "/_wicket_auth_fresh" or "/_wicket_auth")
    local status = res.status
    if status == 401 or status == 403 then
        return ngx.exec("@wicket")
    end
    if status < 200 or status > 299 then
        return ngx.exit(ngx.HTTP_INTERNAL_SERVER_ERROR)
    end
    local h = {}
    for k, v in pairs(res.header) do
        h[string.lower(k)] = v
    end
    local function one(name)
        local v = h[name]
        if type(v) == "table" then v = v[1] end
        return v or ""
    end
    ngx_var.wicket_pass = pass_value(one("wicket-user"), one("wicket-device"), one("wicket-room"),
        one("wicket-position"), one("wicket-forward-cookie"), one("wicket-forward-authorization"))
    -- As auth_request_set: the first cookie the edge sets (add_header in wicket-lua-protect.conf).
    ngx_var.wicket_lua_cookie = one("set-cookie")
    -- The edge passed this very session for this client: later requests pass here.
    if session and h["set-cookie"] == nil and one("wicket-room") == session.room and one("wicket-user") == session.sub then
        confirm(session.key)
        remember_seen(session.key, ngx.now())
        return true
    end
end

-- What the request's credentials show for `rule` when nginx may pass it (given the edge's
-- confirmation): { sub, device, pos, exp, key (the confirmation's), fwd_cookie, fwd_auth }; nil
-- when the edge must decide.
local function check(rule, cookies, auth, ip, user_raw, now)
    local token = cookie(cookies, rule.cookie)
    if not token and auth and starts(auth, "Bearer ") then
        token = gsub(sub(auth, 8), "^%s*(.-)%s*$", "%1")
    end
    local device = device_of(cookie(cookies, "wicket_d"))
    if not token or not device then return nil end
    local vkey = token .. " " .. rule.room
    local claims = verified:get(vkey)
    if not claims then
        claims = verify_token(token, rule, now)
        if not claims then return nil end
        verified:set(vkey, claims, claims.exp + cfg.leeway - now)
    end
    local user = user_of(user_raw, cookies)
    if claims.sub ~= user and claims.sub ~= device then return nil end
    local fwd_cookie, fwd_auth = forward_credentials(cookies, auth, rule.room)
    return { sub = claims.sub, device = device, pos = tostring(claims.pos), exp = claims.exp,
             key = confirmation_key(rule.room, claims.sub, ip, user, device),
             fwd_cookie = fwd_cookie, fwd_auth = fwd_auth }
end

local function remember_passed(key, p)
    if passed[key] == nil then
        if passed_n >= cfg.decided_max then
            passed_old, passed, passed_n = passed, {}, 0
        end
        passed_n = passed_n + 1
    end
    passed[key] = p
    if native then
        native.wicket_native_remember(key, #key, p.ckey, #p.ckey, p.pass, #p.pass, p.till * 1000)
    end
end

-- The first request of a fan's credentials on a path, and any the fast path cannot pass: the
-- rule, the token and holder checked, the confirmation looked up; a pass is remembered for `key`.
local function access_slow(key)
    local rule = local_rule(ngx_var.uri)
    if not rule then return ask_edge(nil) end
    local cookies, auth, ip = ngx_var.http_cookie, ngx_var.http_authorization, ngx_var.remote_addr
    local now = ngx.time()
    local d = check(rule, cookies, auth, ip, user_header_value(), now)
    if not d then return ask_edge(nil) end
    local pass = pass_value(d.sub, d.device, rule.room, d.pos, d.fwd_cookie, d.fwd_auth)
    if confirmed_till(d.key, ngx.now()) then
        remember_seen(d.key, ngx.now())
        ngx_var.wicket_pass = pass
    elseif not ask_edge({ key = d.key, room = rule.room, sub = d.sub }) then
        -- The edge refused, or passed without confirming this session: nothing to remember.
        return
    end
    -- Passed (confirmed before, or by the edge just now): the next request with these credentials
    -- passes from what is remembered (in C, with the native fast path).
    -- `key` stands for this request only when it holds the user id the edge reads: nginx's
    -- `$wicket_user_header` (wicket-lua-http.conf) must be the edge's user-header.
    if state.user_var then
        local raw = ngx_var[state.user_var]
        if type(raw) == "table" then raw = raw[1] end
        if (raw or "") ~= ngx_var.wicket_user_header then
            if not state.warned_user_header then
                state.warned_user_header = true
                ngx.log(ngx.ERR, "wicket: $wicket_user_header is not the edge's user-header (", state.user_header,
                    "): set it in wicket-lua-http.conf; until then every request is checked in full")
            end
            return
        end
    end
    remember_passed(key, { ckey = d.key, pass = pass, till = d.exp + cfg.leeway })
end

--- The access phase of a guarded location.
function _M.access()
    if ngx_req.is_internal() then
        -- nginx's internal redirect (an index file, try_files) of a request this check passed a
        -- moment ago passes again, with what it found: the request the client sent was judged, as
        -- the edge judges it on the auth_request path (`X-Original-URI: $request_uri`).
        local pass = ngx_var.wicket_pass
        if pass ~= nil and pass ~= "" then return end
    end
    local key = ngx_var.wicket_key
    local p = passed[key]
    if p == nil then
        p = passed_old[key]
        if p ~= nil then remember_passed(key, p) end
    end
    if p ~= nil then
        local now = ngx.now()
        local c = confirmed[p.ckey]
        if p.till > now and state.fresh_till > now and c ~= nil and c > now then
            remember_seen(p.ckey, now)
            ngx_var.wicket_pass = p.pass
            return
        end
    end
    return access_slow(key)
end

-- Asks the edge's /wicket/revoke to end the session of the token `head` carried (a timer: the
-- answer is already on its way to the client).
local function revoke_at_edge(premature, head)
    if premature then return end
    local sock = ngx.socket.tcp()
    sock:settimeout(2000)
    local ok, err = sock:connect(cfg.edge_host, cfg.edge_port)
    if not ok then
        ngx.log(ngx.ERR, "wicket: revoke not delivered: ", err)
        return
    end
    sock:send("GET /wicket/revoke HTTP/1.1\r\nHost: wicket\r\nConnection: close\r\n" .. head .. "\r\n")
    local status = sock:receive("*l")
    sock:close()
    if not status or not find(status, " 204", 1, true) then
        ngx.log(ngx.ERR, "wicket: revoke answered ", status or "nothing")
    end
end

local function header_line(name, value)
    if value == nil or find(value, "[\r\n]") then return "" end
    return name .. ": " .. value .. "\r\n"
end

-- The origin revoked the session of a request (its path, target, method, X-Forwarded-For,
-- cookies, Authorization, user id header and client address): this worker's confirmation of it
-- and the shared dict's dropped at once, and the edge told (every copy of the token then stops
-- passing everywhere within two intervals).
local function revoke(uri, request_uri, method, xff, cookies, auth, user_raw, ip)
    local rule = local_rule(uri)
    local d = rule and check(rule, cookies, auth, ip, user_raw, ngx.time())
    if d then unconfirm(d.key) end
    local head = header_line("X-Original-URI", request_uri)
        .. header_line("X-Original-Method", method)
        .. header_line("X-Forwarded-For", xff)
        .. header_line("Cookie", cookies)
        .. header_line("Authorization", auth)
    if state.user_header then
        head = head .. header_line(state.user_header, user_raw)
    end
    ngx.timer.at(0, revoke_at_edge, head)
end

--- The header filter of a guarded location: on the origin's `Wicket-Revoke: 1` (which
--- wicket-lua-protect.conf's proxy_hide_header keeps from the client) the admission cookie is
--- cleared, this worker's confirmation of the session and the shared dict's dropped at once, and the
--- edge told (every copy of the token then stops passing everywhere within two intervals).
function _M.header_filter()
    local flag = ngx_var.upstream_http_wicket_revoke
    if flag == nil then return end
    local room = ngx_var.wicket_pass_room
    if flag ~= "1" or not room or room == "" then return end
    local set = ngx.header["Set-Cookie"]
    local cookies = type(set) == "table" and set or { set }
    cookies[#cookies + 1] = "wicket_a_" .. room .. "=; Path=/; Max-Age=0; HttpOnly; SameSite=Lax"
    ngx.header["Set-Cookie"] = cookies
    revoke(ngx_var.uri, ngx_var.request_uri, ngx_var.request_method, ngx_var.proxy_add_x_forwarded_for,
        ngx_var.http_cookie, ngx_var.http_authorization, user_header_value(), ngx_var.remote_addr)
end

-- The native fast path's header filter (nginx-compat/native) queues the origin's revokes of a
-- `wicket_native on` location instead: this worker's timer takes them every 50 ms.
local revoke_rec
local function native_revokes(premature)
    if premature then return end
    local f = {}
    while native.wicket_native_revoke_take(revoke_rec) == 1 do
        for i = 0, 7 do
            local v = revoke_rec.f[i]
            f[i + 1] = v.len > 0 and ffi.string(v.data, v.len) or nil
        end
        revoke(f[1] or "", f[2], f[3], f[4], f[5], f[6], f[7], f[8] or "")
    end
    local dropped = native.wicket_native_revokes_dropped()
    if dropped > 0 then
        ngx.log(ngx.ERR, "wicket: ", dropped, " revokes of the native path dropped (over 1024 waiting)")
    end
end

-- The report -------------------------------------------------------------------------------------

-- One POST of `body` on `sock` (connected); the answer's status, body and whether the connection
-- may be reused, or nil and why.
local function post_sessions(sock, body)
    local ok, err = sock:send("POST /wicket/sessions HTTP/1.1\r\nHost: wicket\r\nContent-Type: text/plain\r\nContent-Length: "
        .. #body .. "\r\n\r\n" .. body)
    if not ok then return nil, err end
    local status_line, rerr = sock:receive("*l")
    if not status_line then return nil, rerr end
    local status = tonumber(string.match(status_line, "^HTTP/1%.%d (%d%d%d)"))
    local length, reusable = nil, find(status_line, "HTTP/1.1", 1, true) == 1
    while true do
        local line = sock:receive("*l")
        if not line then return nil, "cut off" end
        if line == "" then break end
        local lower = string.lower(line)
        local n = string.match(lower, "^content%-length:%s*(%d+)")
        if n then length = tonumber(n) end
        if string.match(lower, "^connection:.*close") then reusable = false end
    end
    if not length then return nil, "no length" end
    local data = sock:receive(length)
    if not data then return nil, "cut off" end
    return status, data, reusable
end

-- POSTs `body` to the edge's /wicket/sessions over a kept-alive connection (a report of many
-- sessions is many POSTs, each second); the decoded answer, or nil and why. A kept connection the
-- edge has meanwhile closed is retried once on a new one.
local function report(body)
    for _ = 1, 2 do
        local sock = ngx.socket.tcp()
        sock:settimeout(2000)
        local ok, err = sock:connect(cfg.edge_host, cfg.edge_port)
        if not ok then return nil, err end
        local reused = (sock:getreusedtimes() or 0) > 0
        local status, data, reusable = post_sessions(sock, body)
        if status then
            if reusable then sock:setkeepalive(60000, 4) else sock:close() end
            if status ~= 200 then return nil, "status " .. tostring(status) end
            return cjson.decode(data)
        end
        sock:close()
        if not reused then return nil, data end
    end
    return nil, "no answer"
end

local function apply_config(v)
    if type(v.protected) ~= "table" or type(v.edge_only) ~= "table" then return false end
    local protected, sig = {}, {}
    for _, r in ipairs(v.protected) do
        protected[#protected + 1] = { path = r.path, room = r.room, event = r.event, is_local = r["local"] == true,
                                      cookie = "wicket_a_" .. r.room }
        sig[#sig + 1] = table.concat({ tostring(r.path), tostring(r.room), tostring(r.event), tostring(r["local"]) }, "\0")
    end
    for _, p in ipairs(v.edge_only) do sig[#sig + 1] = "edge\0" .. tostring(p) end
    sig[#sig + 1] = "user\0" .. tostring(v.user_header) .. "\0" .. tostring(v.user_cookie)
    sig = table.concat(sig, "\n")
    local changed = sig ~= state.sig
    if changed then
        -- Another rule, prefix or user source: what was passed is checked again.
        passed, passed_n, passed_old = {}, 0, {}
        state.sig = sig
    end
    state.protected, state.edge_only = protected, v.edge_only
    state.user_header = type(v.user_header) == "string" and v.user_header or nil
    state.user_var = state.user_header and "http_" .. gsub(state.user_header, "-", "_") or nil
    state.user_cookie = type(v.user_cookie) == "string" and v.user_cookie or nil
    if changed and native then
        -- Forgets the module's passes too, and tells it the header the user id comes in.
        local h = state.user_header or ""
        if native.wicket_native_user_header(h, #h) ~= 1 then
            ngx.log(ngx.ERR, "wicket: the user id header's name is too long for the native fast path")
        end
    end
    state.at = ngx.now()
    state.fresh_till = state.at + 3 * cfg.interval
    if native then native.wicket_native_fresh(state.fresh_till * 1000) end
    return true
end

-- One report: the sessions this worker passed in the last `idle` seconds (so a fan who pauses
-- between pages stays confirmed), in requests the edge takes (at most 5000 lines and
-- `report_bytes`). One at a time per worker: a slow edge delays reports, never piles them up.
local reporting = false
local function report_all()
    local batch = {}
    local now = ngx.now()
    local since = now - cfg.idle
    for k, at in pairs(seen) do
        if native then
            -- Requests the native fast path passed count as seen too.
            local n = native.wicket_native_seen(k, #k) / 1000
            if n > at then
                at = n
                seen[k] = n
            end
        end
        if at < since then
            seen[k] = nil
            seen_n = seen_n - 1
            -- No longer reported, so no longer renewed: the module must not pass it on a
            -- confirmation that is about to lapse (its passes would not put it back in the
            -- reports; wicket.lua's own pass does).
            if native then native.wicket_native_unconfirm(k, #k) end
        else
            batch[#batch + 1] = k
        end
    end
    -- Lapsed confirmations leave this worker's record (sessions no longer seen are not renewed).
    for k, till in pairs(confirmed) do
        if till <= now then confirmed[k] = nil end
    end
    if native then native.wicket_native_sweep(now * 1000) end
    local i = 1
    repeat
        local lines, size = {}, 0
        while i <= #batch and #lines < 5000 and size + #batch[i] + 1 <= cfg.report_bytes do
            lines[#lines + 1] = batch[i]
            size = size + #batch[i] + 1
            i = i + 1
        end
        if #lines == 0 and i <= #batch then i = i + 1 end -- a line over the limit: never confirmed
        local v, err = report(table.concat(lines, "\n"))
        if not v or type(v.ok) ~= "string" or not apply_config(v) then
            ngx.log(ngx.WARN, "wicket: report to the edge failed: ", err or "bad answer")
            -- Unconfirmed sessions lapse within two intervals: the edge decides them again.
            return
        end
        for j, key in ipairs(lines) do
            if sub(v.ok, j, j) == "1" then
                confirm(key)
            else
                unconfirm(key)
                if seen[key] then
                    seen[key] = nil
                    seen_n = seen_n - 1
                end
            end
        end
    until i > #batch
end

local function sync(premature)
    if premature or reporting then return end
    reporting = true
    local ok, err = pcall(report_all)
    reporting = false
    if not ok then ngx.log(ngx.ERR, "wicket: report: ", err) end
end

--- Starts the worker's report timer (init_worker_by_lua) and pulls the edge's config at once.
function _M.start()
    assert(device_key, "wicket: configure{} was not called (init_by_lua)")
    verified = assert(lrucache.new(cfg.verified_max))
    md_ctx = C.EVP_MD_CTX_new()
    dict = assert(ngx.shared[cfg.dict], "wicket: lua_shared_dict " .. cfg.dict .. " is missing (wicket-lua-http.conf)")
    -- nginx loads dynamic modules RTLD_GLOBAL: ffi.C finds the native fast path's functions when
    -- ngx_http_wicket_module.so is loaded, and errs when it is not.
    local ok, version = pcall(function() return C.wicket_native_version() end)
    if ok and version == 1 and C.wicket_native_start(cfg.decided_max) == 1 then
        native = C
        revoke_rec = ffi.new("wicket_native_revoke_t")
        assert(ngx.timer.every(0.05, native_revokes))
    end
    ngx.timer.at(0, sync)
    assert(ngx.timer.every(cfg.interval, sync))
end

return _M

// Package caddymodule plugs Token Terminator into Caddy as the HTTP handler
// http.handlers.token_terminator (Caddyfile directive token_terminator).
//
// The handler is deliberately thin: it decides only whether a request is a
// candidate (by method and path, through compiler.FormatFor), buffers the
// body within max_body_size, hands it to the compiler and forwards whatever
// the compiler says must be forwarded. Every decision about the content
// belongs to the compiler.
package caddymodule

import (
	"bytes"
	"context"
	"crypto/sha256"
	"encoding/hex"
	"fmt"
	"io"
	"net/http"
	"os"
	"path/filepath"
	"runtime"
	"strconv"
	"strings"
	"sync/atomic"
	"time"

	"github.com/caddyserver/caddy/v2"
	"github.com/caddyserver/caddy/v2/modules/caddyhttp"
	"go.uber.org/zap"

	"github.com/tokenterminator/caddy-token-terminator/compiler"
)

func init() {
	caddy.RegisterModule(Handler{})
}

// Defaults. They are part of the interface: changing one changes behaviour
// for every operator who did not set the subdirective.
const (
	DefaultMinArtifactChars = 8000
	DefaultMaxArtifactChars = 2000000
	DefaultVaultMaxBytes    = 512 << 20
	DefaultInlineLeases     = 1
	DefaultMaxBodySize      = 32 << 20
	// MaxMaxBodySize bounds max_body_size: a request is held whole in
	// memory while it compiles.
	MaxMaxBodySize              = 1 << 30
	DefaultMode                 = string(compiler.ModeEnforce)
	DefaultTokenizer            = "auto"
	DefaultTokenBudget          = 250 * time.Millisecond
	DefaultTokenCacheSize       = 64 << 20
	DefaultContextCompaction    = true
	DefaultContextMinVaultChars = 4000
	MinContextMinVaultChars     = 500
	DefaultCollapseAfterTurns   = 6
	DefaultInlineRecentTurns    = 5
	DefaultCompileTimeout       = 2 * time.Second
	DefaultMaxBufferedBytes     = 256 << 20

	// HeaderName is the response header reporting the decision for every
	// candidate request.
	HeaderName = "Token-Terminator"
)

// Handler compiles LLM provider requests before they are proxied: large tool
// results the model has already seen are moved into an embedded vault and
// replaced by short receipts. Put it before reverse_proxy.
//
// Numeric fields are pointers so that an explicit 0 in JSON (for example
// inline_leases 0, which turns lease receipts off) is distinguishable from
// an unset field; unset fields get their defaults in Provision.
type Handler struct {
	// Directory of the embedded vault (Badger). One database is opened per
	// directory and shared by every handler and config that names it.
	// Default: Caddy's data directory + "/token-terminator".
	VaultDir string `json:"vault_dir,omitempty"`

	// Tool results shorter than this many characters are never touched.
	// Default: 8000.
	MinArtifactChars *int `json:"min_artifact_chars,omitempty"`

	// Tool results longer than this many characters are never touched.
	// Default: 2000000.
	MaxArtifactChars *int `json:"max_artifact_chars,omitempty"`

	// Total size cap of the vault in bytes. When it is full, requests pass
	// through unchanged. Default: 512 MiB.
	VaultMaxBytes *int64 `json:"vault_max_bytes,omitempty"`

	// How many forwarded requests of one conversation may carry a large
	// artifact inline before later requests get a receipt instead.
	// 0 turns lease receipts off. Default: 1.
	InlineLeases *int `json:"inline_leases,omitempty"`

	// Candidate bodies larger than this many bytes stream through
	// untouched and are never held whole in memory. Default: 32 MiB.
	MaxBodySize *int64 `json:"max_body_size,omitempty"`

	// enforce (forward the rewrite when the gate accepts it), shadow
	// (compile, record and report, but forward the original) or off.
	// Default: enforce.
	Mode string `json:"mode,omitempty"`

	// Optional extra conversation key, usually a placeholder such as
	// {http.request.header.X-Session-Id}. It is evaluated per request and
	// hashed before it reaches the compiler.
	Session string `json:"session,omitempty"`

	// Token counter: auto (by the request's model), o200k_base,
	// cl100k_base or off. Default: auto.
	Tokenizer string `json:"tokenizer,omitempty"`

	// How long token counting may take per request before the token veto
	// is skipped. Default: 250ms.
	TokenBudget caddy.Duration `json:"token_budget,omitempty"`

	// Bytes of memory for the cache of token counts. Default: 64 MiB.
	TokenCacheSize *int64 `json:"token_cache_size,omitempty"`

	// Context compaction of old turns. Default: true.
	ContextCompaction *bool `json:"context_compaction,omitempty"`

	// Old tool results at least this long are vaulted by compaction
	// (at least 500). Default: 4000.
	ContextMinVaultChars *int `json:"context_min_vault_chars,omitempty"`

	// Turns older than this many most recent are folded into summaries;
	// 0 never folds. Must be 0 or >= inline_recent_turns. Default: 6.
	CollapseAfterTurns *int `json:"collapse_after_turns,omitempty"`

	// The last this many turns are never changed by compaction.
	// Default: 5.
	InlineRecentTurns *int `json:"inline_recent_turns,omitempty"`

	// Upper bound of one compile; past it the original goes upstream.
	// Default: 2s.
	CompileTimeout caddy.Duration `json:"compile_timeout,omitempty"`

	// Upper bound of the request bodies this handler holds at once (a body
	// of unknown length counts as max_body_size). A compile works in a small
	// multiple of its body, so this bounds the module's memory under a burst
	// of large requests; past it, candidates stream through untouched
	// (passthrough=busy). Default: 256MiB.
	MaxBufferedBytes *int64 `json:"max_buffered_bytes,omitempty"`

	// runtime state
	buffered *atomic.Int64 // bytes of bodies held now
	// invalidOutputs counts rewrites the validity check refused since start;
	// logged with each one so an operator can alert on it.
	invalidOutputs func() uint64
	logger         *zap.Logger
	comp           compileFunc
	tenants        tenantFunc
	formatFor      func(method, path string) (string, bool)
	vaultKey       string
	counterKey     string
}

// Badger allows one open database per directory, and Caddy provisions a new
// config before it cleans up the old one. So vaults live in a usage pool
// keyed by the cleaned absolute directory: handlers of the old and the new
// config share the same store, and the last one to leave closes it.
var vaults = caddy.NewUsagePool()

// Token counters are shared the same way, keyed by their configuration, so
// a reload keeps the warm count cache and two routes don't hold two caches.
var counters = caddy.NewUsagePool()

// vaultStore is what the handler needs from the vault.
type vaultStore interface {
	compiler.Store
	// Tenant maps a credential to an opaque keyed hash ("" -> anonymous).
	Tenant(credential string) string
}

// compileFunc and tenantFunc are the handler's only dependencies on the
// compiler and the vault; tests replace them.
type (
	compileFunc func(ctx context.Context, req compiler.Request) compiler.Result
	tenantFunc  func(credential string) string
)

// CaddyModule returns the Caddy module information.
func (Handler) CaddyModule() caddy.ModuleInfo {
	return caddy.ModuleInfo{
		ID:  "http.handlers.token_terminator",
		New: func() caddy.Module { return new(Handler) },
	}
}

func intp(v int) *int       { return &v }
func int64p(v int64) *int64 { return &v }
func boolp(v bool) *bool    { return &v }

// applyDefaults fills every unset field with its default.
func (h *Handler) applyDefaults() {
	if h.VaultDir == "" {
		h.VaultDir = filepath.Join(caddy.AppDataDir(), "token-terminator")
	}
	if h.MinArtifactChars == nil {
		h.MinArtifactChars = intp(DefaultMinArtifactChars)
	}
	if h.MaxArtifactChars == nil {
		h.MaxArtifactChars = intp(DefaultMaxArtifactChars)
	}
	if h.VaultMaxBytes == nil {
		h.VaultMaxBytes = int64p(DefaultVaultMaxBytes)
	}
	if h.InlineLeases == nil {
		h.InlineLeases = intp(DefaultInlineLeases)
	}
	if h.MaxBodySize == nil {
		h.MaxBodySize = int64p(DefaultMaxBodySize)
	}
	if h.Mode == "" {
		h.Mode = DefaultMode
	}
	if h.Tokenizer == "" {
		h.Tokenizer = DefaultTokenizer
	}
	if h.TokenBudget == 0 {
		h.TokenBudget = caddy.Duration(DefaultTokenBudget)
	}
	if h.TokenCacheSize == nil {
		h.TokenCacheSize = int64p(DefaultTokenCacheSize)
	}
	if h.ContextCompaction == nil {
		h.ContextCompaction = boolp(DefaultContextCompaction)
	}
	if h.ContextMinVaultChars == nil {
		h.ContextMinVaultChars = intp(DefaultContextMinVaultChars)
	}
	if h.CollapseAfterTurns == nil {
		h.CollapseAfterTurns = intp(DefaultCollapseAfterTurns)
	}
	if h.InlineRecentTurns == nil {
		h.InlineRecentTurns = intp(DefaultInlineRecentTurns)
	}
	if h.CompileTimeout == 0 {
		h.CompileTimeout = caddy.Duration(DefaultCompileTimeout)
	}
	if h.MaxBufferedBytes == nil {
		h.MaxBufferedBytes = int64p(DefaultMaxBufferedBytes)
	}
	if h.buffered == nil {
		h.buffered = new(atomic.Int64)
	}
}

// Provision sets defaults, checks the values and opens (or joins) the vault
// and the token counter.
func (h *Handler) Provision(ctx caddy.Context) error {
	h.logger = ctx.Logger()
	h.applyDefaults()
	if err := h.Validate(); err != nil {
		return err
	}
	h.formatFor = compiler.FormatFor
	if h.Mode == string(compiler.ModeOff) {
		// Nothing is ever compiled: don't open the vault.
		return nil
	}

	dir, err := filepath.Abs(h.VaultDir)
	if err != nil {
		return fmt.Errorf("token_terminator: vault_dir %q: %v", h.VaultDir, err)
	}
	dir = filepath.Clean(dir)
	if err := ensurePrivateDir(dir); err != nil {
		return fmt.Errorf("token_terminator: vault_dir %q: %v", dir, err)
	}

	store, err := h.acquireVault(dir)
	if err != nil {
		return fmt.Errorf("token_terminator: opening vault in %q: %v", dir, err)
	}
	counter, err := h.acquireCounter()
	if err != nil {
		return fmt.Errorf("token_terminator: tokenizer %q: %v", h.Tokenizer, err)
	}
	comp, err := compiler.New(h.compilerOptions(), store, counter)
	if err != nil {
		return fmt.Errorf("token_terminator: %v", err)
	}
	h.comp = comp.Compile
	h.invalidOutputs = comp.InvalidOutputs
	h.tenants = store.Tenant
	return nil
}

// compilerOptions maps the configuration onto compiler.Options, every
// field set explicitly (zero compaction turn counts are meaningful).
func (h *Handler) compilerOptions() compiler.Options {
	return compiler.Options{
		MinArtifactChars: *h.MinArtifactChars,
		MaxArtifactChars: *h.MaxArtifactChars,
		InlineLeases:     *h.InlineLeases,
		Timeout:          time.Duration(h.CompileTimeout),
		Compaction: compiler.Compaction{
			Enabled:            *h.ContextCompaction,
			MinVaultChars:      *h.ContextMinVaultChars,
			CollapseAfterTurns: *h.CollapseAfterTurns,
			InlineRecentTurns:  *h.InlineRecentTurns,
		},
	}
}

// ensurePrivateDir creates dir with mode 0700 and tightens an existing
// directory that is readable by group or others.
func ensurePrivateDir(dir string) error {
	if err := os.MkdirAll(dir, 0o700); err != nil {
		return err
	}
	fi, err := os.Stat(dir)
	if err != nil {
		return err
	}
	if !fi.IsDir() {
		return fmt.Errorf("not a directory")
	}
	if runtime.GOOS != "windows" && fi.Mode().Perm()&0o077 != 0 {
		if err := os.Chmod(dir, 0o700); err != nil {
			return fmt.Errorf("directory is accessible by other users and cannot be restricted to 0700: %v", err)
		}
	}
	return nil
}

// Validate checks the configuration. Unset fields are checked as their
// defaults, so it gives the same answer before and after Provision.
func (h *Handler) Validate() error {
	c := *h
	c.applyDefaults()
	return c.check()
}

// check validates a configuration whose defaults are applied.
func (h *Handler) check() error {
	errf := func(format string, a ...any) error {
		return fmt.Errorf("token_terminator: "+format, a...)
	}
	if strings.TrimSpace(h.VaultDir) == "" {
		return errf("vault_dir must not be empty")
	}
	if *h.MinArtifactChars < 1 {
		return errf("min_artifact_chars must be at least 1, got %d", *h.MinArtifactChars)
	}
	if *h.MaxArtifactChars < 1 {
		return errf("max_artifact_chars must be at least 1, got %d", *h.MaxArtifactChars)
	}
	if *h.MinArtifactChars > *h.MaxArtifactChars {
		return errf("min_artifact_chars (%d) must not exceed max_artifact_chars (%d)", *h.MinArtifactChars, *h.MaxArtifactChars)
	}
	if *h.VaultMaxBytes < 1 {
		return errf("vault_max_bytes must be positive, got %d", *h.VaultMaxBytes)
	}
	if *h.InlineLeases < 0 {
		return errf("inline_leases must be 0 (off) or more, got %d", *h.InlineLeases)
	}
	if *h.MaxBodySize < 1 || *h.MaxBodySize > MaxMaxBodySize {
		return errf("max_body_size must be between 1 and %d bytes, got %d", MaxMaxBodySize, *h.MaxBodySize)
	}
	switch compiler.Mode(h.Mode) {
	case compiler.ModeEnforce, compiler.ModeShadow, compiler.ModeOff:
	default:
		return errf("mode must be enforce, shadow or off, got %q", h.Mode)
	}
	switch h.Tokenizer {
	case "auto", "o200k_base", "cl100k_base", "off":
	default:
		return errf("tokenizer must be auto, o200k_base, cl100k_base or off, got %q", h.Tokenizer)
	}
	if h.TokenBudget < 0 {
		return errf("token_budget must be positive, got %s", time.Duration(h.TokenBudget))
	}
	if *h.TokenCacheSize < 1 {
		return errf("token_cache_size must be positive, got %d", *h.TokenCacheSize)
	}
	if *h.ContextMinVaultChars < MinContextMinVaultChars {
		return errf("context_min_vault_chars must be at least %d, got %d", MinContextMinVaultChars, *h.ContextMinVaultChars)
	}
	if *h.CollapseAfterTurns < 0 {
		return errf("collapse_after_turns must be 0 (never fold) or more, got %d", *h.CollapseAfterTurns)
	}
	if *h.InlineRecentTurns < 0 {
		return errf("inline_recent_turns must be 0 or more, got %d", *h.InlineRecentTurns)
	}
	if c, r := *h.CollapseAfterTurns, *h.InlineRecentTurns; c != 0 && c < r {
		return errf("collapse_after_turns (%d) must be 0 or at least inline_recent_turns (%d)", c, r)
	}
	if h.CompileTimeout < 0 {
		return errf("compile_timeout must be positive, got %s", time.Duration(h.CompileTimeout))
	}
	if *h.MaxBufferedBytes < 1 {
		return errf("max_buffered_bytes must be positive, got %d", *h.MaxBufferedBytes)
	}
	return nil
}

// Cleanup releases this handler's share of the vault and token counter;
// the last user closes them. Caddy provisions a new config before it
// cleans up the old one, so a reload keeps the same open vault.
func (h *Handler) Cleanup() error {
	var firstErr error
	if h.counterKey != "" {
		if _, err := counters.Delete(h.counterKey); err != nil && firstErr == nil {
			firstErr = err
		}
		h.counterKey = ""
	}
	if h.vaultKey != "" {
		if _, err := vaults.Delete(h.vaultKey); err != nil && firstErr == nil {
			firstErr = fmt.Errorf("token_terminator: closing vault %q: %v", h.vaultKey, err)
		}
		h.vaultKey = ""
	}
	return firstErr
}

// ServeHTTP compiles candidate requests and passes everything on to next.
func (h *Handler) ServeHTTP(w http.ResponseWriter, r *http.Request, next caddyhttp.Handler) error {
	if h.Mode == string(compiler.ModeOff) || h.comp == nil {
		return next.ServeHTTP(w, r)
	}
	format, ok := h.formatFor(r.Method, r.URL.Path)
	if !ok {
		return next.ServeHTTP(w, r)
	}

	start := time.Now()
	rep := report{format: format, path: r.URL.Path, rawBytes: r.ContentLength, sentBytes: r.ContentLength}

	// A body the module cannot decode passes through untouched.
	if ce := r.Header.Get("Content-Encoding"); ce != "" && !strings.EqualFold(strings.TrimSpace(ce), "identity") {
		rep.passthrough(compiler.ReasonContentEncoding)
		return h.forward(w, r, next, &rep, start)
	}
	maxBody := *h.MaxBodySize
	if r.ContentLength > maxBody {
		rep.passthrough(compiler.ReasonTooLarge)
		return h.forward(w, r, next, &rep, start)
	}

	// Hold no more than max_buffered_bytes of bodies at once; the body stays
	// referenced until the upstream has read it, so the share is returned
	// when next returns.
	share := r.ContentLength
	if share < 0 {
		share = maxBody
	}
	if h.buffered.Add(share) > *h.MaxBufferedBytes {
		h.buffered.Add(-share)
		rep.passthrough(compiler.ReasonBusy)
		return h.forward(w, r, next, &rep, start)
	}
	defer h.buffered.Add(-share)

	orig := r.Body
	if orig == nil {
		orig = http.NoBody
	}
	buf, over, readErr := readAtMost(orig, maxBody, r.ContentLength)
	rep.read = time.Since(start)
	switch {
	case readErr != nil:
		// The body already read cannot be un-read: forward it followed by
		// the same error, so upstream sees what it would have seen without
		// the module.
		r.Body = readCloser{io.MultiReader(bytes.NewReader(buf), errReader{readErr}), orig}
		rep.passthrough(compiler.ReasonReadError)
		rep.rawBytes, rep.sentBytes = int64(len(buf)), int64(len(buf))
		return h.forward(w, r, next, &rep, start)
	case over:
		// Too large without a Content-Length: stream the rest through.
		r.Body = readCloser{io.MultiReader(bytes.NewReader(buf), orig), orig}
		rep.passthrough(compiler.ReasonTooLarge)
		if r.ContentLength < 0 {
			rep.rawBytes, rep.sentBytes = -1, -1
		}
		return h.forward(w, r, next, &rep, start)
	}

	mode := compiler.Mode(h.Mode)
	req := compiler.Request{
		Path: r.URL.Path,
		Body: buf,
		Scope: compiler.Scope{
			Tenant:  h.tenants(credential(r.Header)),
			Session: h.session(r),
		},
		Mode: mode,
	}
	res := h.compile(r.Context(), req)

	out := buf
	if mode == compiler.ModeEnforce && res.Decision == compiler.Accepted && res.Body != nil {
		out = res.Body
	}
	setBody(r, out)

	rep.fromResult(res, int64(len(buf)), int64(len(out)), mode)
	if res.Reason == compiler.ReasonInvalidOutput && h.invalidOutputs != nil {
		rep.invalidTotal = h.invalidOutputs()
	}
	rep.tenant = req.Scope.Tenant
	return h.forward(w, r, next, &rep, start)
}

// compile runs the compiler under the compile timeout and turns a panic into
// a pass-through of the original body.
func (h *Handler) compile(parent context.Context, req compiler.Request) (res compiler.Result) {
	ctx, cancel := context.WithTimeout(parent, time.Duration(h.CompileTimeout))
	defer cancel()
	defer func() {
		if v := recover(); v != nil {
			// Never log the panic value itself: it could quote content.
			fields := []zap.Field{zap.String("panic_type", fmt.Sprintf("%T", v)), zap.Stack("stack")}
			if re, ok := v.(runtime.Error); ok {
				fields = append(fields, zap.String("runtime_error", re.Error()))
			}
			h.logger.Error("token_terminator: compiler panic; forwarding the original request", fields...)
			res = compiler.Result{
				Body:      req.Body,
				Decision:  compiler.Passthrough,
				Reason:    compiler.ReasonPanic,
				RawBytes:  len(req.Body),
				SentBytes: len(req.Body),
			}
		}
	}()
	return h.comp(ctx, req)
}

// forward sets the report header, calls next and writes the log line.
func (h *Handler) forward(w http.ResponseWriter, r *http.Request, next caddyhttp.Handler, rep *report, start time.Time) error {
	w.Header().Set(HeaderName, rep.header())
	rep.total = time.Since(start)
	h.logger.Info("token_terminator", rep.fields()...)
	return next.ServeHTTP(w, r)
}

// session evaluates the session placeholder and hashes its value.
func (h *Handler) session(r *http.Request) string {
	if h.Session == "" {
		return ""
	}
	v := h.Session
	if repl, ok := r.Context().Value(caddy.ReplacerCtxKey).(*caddy.Replacer); ok {
		v = repl.ReplaceAll(h.Session, "")
	}
	if v == "" {
		return ""
	}
	sum := sha256.Sum256([]byte("token-terminator session\x00" + v))
	return "s_" + hex.EncodeToString(sum[:16])
}

// credential returns the request's API credential, the first of the
// headers providers use. It is only ever handed to the vault's keyed hash.
func credential(h http.Header) string {
	// Api-Key is Azure OpenAI's header; without it every Azure user would
	// share one anonymous tenant.
	for _, k := range []string{"Authorization", "X-Api-Key", "X-Goog-Api-Key", "Api-Key"} {
		if v := h.Get(k); v != "" {
			return v
		}
	}
	return ""
}

// setBody makes b the request body, with a consistent Content-Length, no
// Transfer-Encoding and a GetBody for transports that rewind.
func setBody(r *http.Request, b []byte) {
	r.Body = io.NopCloser(bytes.NewReader(b))
	r.ContentLength = int64(len(b))
	r.Header.Set("Content-Length", strconv.Itoa(len(b)))
	r.Header.Del("Transfer-Encoding")
	r.TransferEncoding = nil
	r.GetBody = func() (io.ReadCloser, error) { return io.NopCloser(bytes.NewReader(b)), nil }
}

// readAtMost reads up to limit+1 bytes of body. over reports that the body
// is longer than limit (buf then holds limit+1 bytes and the rest is still
// unread in body). hint is the declared Content-Length (or -1).
func readAtMost(body io.Reader, limit, hint int64) (buf []byte, over bool, err error) {
	size := int64(512)
	if hint >= 0 && hint <= limit {
		size = hint + 1 // +1 so that EOF is seen without growing
	}
	buf = make([]byte, 0, size)
	lr := io.LimitReader(body, limit+1)
	for {
		if len(buf) == cap(buf) {
			buf = append(buf, 0)[:len(buf)]
		}
		n, rerr := lr.Read(buf[len(buf):cap(buf)])
		buf = buf[:len(buf)+n]
		if rerr == io.EOF {
			break
		}
		if rerr != nil {
			return buf, false, rerr
		}
	}
	return buf, int64(len(buf)) > limit, nil
}

type readCloser struct {
	io.Reader
	io.Closer
}

type errReader struct{ err error }

func (e errReader) Read([]byte) (int, error) { return 0, e.err }

// Interface guards
var (
	_ caddy.Module                = (*Handler)(nil)
	_ caddy.Provisioner           = (*Handler)(nil)
	_ caddy.Validator             = (*Handler)(nil)
	_ caddy.CleanerUpper          = (*Handler)(nil)
	_ caddyhttp.MiddlewareHandler = (*Handler)(nil)
)

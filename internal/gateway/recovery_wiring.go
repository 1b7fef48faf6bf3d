package gateway

import (
	"github.com/tokenterminator/caddy-token-terminator/internal/compiler"
	"github.com/tokenterminator/caddy-token-terminator/internal/provider"
	"github.com/tokenterminator/caddy-token-terminator/internal/recovery"
)

// Recovery modes (subdirective recovery).
const (
	// RecoveryTool offers the model the token_terminator tool and answers
	// its calls; the artifact API is served too.
	RecoveryTool = "tool"
	// RecoveryAPI serves the artifact API only; receipts name its path.
	RecoveryAPI = "api"
	// RecoveryOff serves nothing and offers nothing.
	RecoveryOff = "off"
)

// CompilerRecovery is what the compiler is told of recovery for the
// effective mode: the receipts' hint and, with tool, the definitions. The
// gateway and the replay tool both wire the compiler with it.
func CompilerRecovery(mode string, cfg recovery.Config) compiler.Recovery {
	switch mode {
	case RecoveryTool:
		tools := compiler.ToolDefinitions{
			Chat:      string(recovery.Definition(provider.Chat)),
			Responses: string(recovery.Definition(provider.Responses)),
			Anthropic: string(recovery.Definition(provider.Anthropic)),
			Gemini:    string(recovery.Definition(provider.Gemini)),
		}
		return compiler.Recovery{Hint: recovery.ToolName + " artifact_get", ToolName: recovery.ToolName, Tools: tools, ConflictHint: apiHint(cfg)}
	case RecoveryAPI:
		return compiler.Recovery{Hint: apiHint(cfg)}
	}
	return compiler.Recovery{}
}

// apiHint is the receipts' hint that names the artifact API.
func apiHint(cfg recovery.Config) string { return "GET " + cfg.Path + "artifacts/{id}" }

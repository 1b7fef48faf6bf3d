package integration

import (
	"context"
	"os"
	"os/exec"
	"regexp"
	"strings"
	"testing"
	"time"
)

// TestDockerfileMatchesModule: the Dockerfile builds this module (its path
// from go.mod) into the Caddy version go.mod requires, so a Caddy upgrade
// cannot leave the image behind.
func TestDockerfileMatchesModule(t *testing.T) {
	mod, caddyVersion := goModule(t)
	df, err := os.ReadFile("../../Dockerfile")
	if err != nil {
		t.Fatal(err)
	}
	text := string(df)
	if m := regexp.MustCompile(`(?m)^ARG CADDY_VERSION=(\S+)$`).FindStringSubmatch(text); m == nil || "v"+m[1] != caddyVersion {
		t.Errorf("the Dockerfile's CADDY_VERSION is %v, go.mod requires Caddy %s", m, caddyVersion)
	}
	if !strings.Contains(text, "--with "+mod+"=/src") {
		t.Errorf("the Dockerfile does not build --with %s=/src", mod)
	}
}

func goModule(t *testing.T) (path, caddyVersion string) {
	t.Helper()
	data, err := os.ReadFile("../../go.mod")
	if err != nil {
		t.Fatal(err)
	}
	m := regexp.MustCompile(`(?m)^module (\S+)$`).FindSubmatch(data)
	c := regexp.MustCompile(`(?m)^\s+github\.com/caddyserver/caddy/v2 (v\S+)$`).FindSubmatch(data)
	if m == nil || c == nil {
		t.Fatal("go.mod names no module path or no Caddy version")
	}
	return string(m[1]), string(c[1])
}

// TestDockerfileBuilds builds the image with docker or podman and checks
// that its caddy lists the module. It needs a running container engine and
// the network for the base images and modules, so it is skipped without one.
func TestDockerfileBuilds(t *testing.T) {
	if testing.Short() {
		t.Skip("-short: the image build takes minutes")
	}
	engine := ""
	for _, tool := range []string{"docker", "podman"} {
		if _, err := exec.LookPath(tool); err != nil {
			continue
		}
		ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
		err := exec.CommandContext(ctx, tool, "info").Run()
		cancel()
		if err == nil {
			engine = tool
			break
		}
	}
	if engine == "" {
		t.Skip("no docker or podman with a running engine: the Dockerfile build is not tested here")
	}
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Minute)
	defer cancel()
	const image = "caddy-token-terminator:test"
	if out, err := exec.CommandContext(ctx, engine, "build", "-t", image, "../..").CombinedOutput(); err != nil {
		t.Fatalf("%s build: %v\n%s", engine, err, out)
	}
	t.Cleanup(func() { exec.Command(engine, "rmi", image).Run() })
	out, err := exec.CommandContext(ctx, engine, "run", "--rm", image, "caddy", "list-modules", "--versions").CombinedOutput()
	if err != nil || !strings.Contains(string(out), "http.handlers.token_terminator") {
		t.Fatalf("the image's caddy does not list the module: %v\n%s", err, out)
	}
	out, err = exec.CommandContext(ctx, engine, "run", "--rm", image, "caddy", "validate", "--config", "/etc/caddy/Caddyfile").CombinedOutput()
	if err != nil {
		t.Fatalf("the image's Caddyfile does not validate: %v\n%s", err, out)
	}
}

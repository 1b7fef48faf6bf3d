package redisvault

import (
	"context"
	"errors"

	"github.com/redis/go-redis/v9"
)

// ErrBadURL means Config.URL does not parse as a redis:// or rediss:// URL
// (or, with Cluster, a cluster seed URL). Its message never quotes the URL,
// which can hold a password.
var ErrBadURL = errors.New("redisvault: url is not a valid redis:// or rediss:// URL")

// Validate reports the first configuration value Open would refuse,
// without connecting: what an operator fixes in the config, so a gateway
// can refuse it when the config loads rather than at first use.
func (cfg Config) Validate() error {
	if _, err := cfg.withDefaults(); err != nil {
		return err
	}
	return checkURL(cfg)
}

// checkURL parses cfg.URL the way newClient does.
func checkURL(cfg Config) error {
	var err error
	if cfg.Cluster {
		_, err = redis.ParseClusterURL(cfg.URL)
	} else {
		_, err = redis.ParseURL(cfg.URL)
	}
	if err != nil {
		return ErrBadURL
	}
	return nil
}

// Check connects to cfg's server once, checks it as Open does and closes
// the connection: it writes nothing, so a gateway can check a config (caddy
// validate) without touching the vault. It returns nil when the server
// answers and is fit, an error for which Refused is true when it answers
// and refuses (an evicting policy, rejected credentials), and any other
// error when it cannot be reached within OpTimeout.
func Check(ctx context.Context, cfg Config) error {
	cfg, err := cfg.withDefaults()
	if err != nil {
		return err
	}
	rdb, err := newClient(cfg)
	if err != nil {
		return err
	}
	defer rdb.Close()
	s := &Store{rdb: rdb, log: cfg.Logger}
	ctx, cancel := context.WithTimeout(ctx, cfg.OpTimeout)
	defer cancel()
	return s.checkServer(ctx)
}

// Refused reports whether err (from Check or Open) is a server that
// answered and refused the configuration, which the operator must fix,
// rather than one that could not be reached.
func Refused(err error) bool {
	return errors.Is(err, ErrEvictingPolicy) || refusedCredentials(err)
}

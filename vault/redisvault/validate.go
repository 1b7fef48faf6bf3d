package redisvault

import (
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

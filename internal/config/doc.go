// Package config owns SpeculaPro's SP_* settings: their names, defaults and
// one-line guidance. It is the single list the commands, the plugins, the
// example env file and docs/configuration.md are checked against, so a setting cannot
// exist in code without being documented, or be documented without existing.
package config

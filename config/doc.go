// Package config loads a node's configuration: embedded defaults, then a YAML file, then
// validation whose errors name the offending field.
package config

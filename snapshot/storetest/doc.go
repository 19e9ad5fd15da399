// Package storetest checks that a snapshot.Store keeps the Store contract: what is put is got
// back byte for byte, a Put is seen whole or not at all, a key the package would not make is
// refused, Delete is idempotent and List returns what begins with a prefix, in key order. Every
// Store runs it against a real backend (a directory, a real S3 server on loopback).
package storetest

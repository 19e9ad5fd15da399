// Package snapshot keeps the state that travels between leases: a workspace archive (a tar
// stream the sandbox made), encrypted with a data key of its own wrapped under its tenant's key
// (Keys), stored content-addressed by the SHA-256 of the archive in a Store (a directory, or an
// S3-compatible bucket), described by a Manifest, listed, pruned and deleted per tenant by a
// Catalog. Nothing stored is a credential: archives hold the sandbox's files, which the gateway
// keeps every credential out of, manifests hold names, sizes and digests, and data keys are
// stored only wrapped.
//
// An archive is untrusted when it comes back (a tenant may have crafted its workspace, or the
// store may have been written by someone else): Filter checks each entry before anything is
// unpacked in a sandbox.
package snapshot

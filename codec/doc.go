// Package codec transforms workflow payloads on their way into the database
// and back, so that inputs, results, signals and side-effect values can be
// kept encrypted at rest.
//
// A [PayloadCodec] is given to the engine as engine.Options.Codec. The engine
// encodes every payload it writes (workflow inputs and results, activity
// inputs and results, heartbeat details, signal payloads, side-effect values,
// child workflow and continue-as-new inputs, job inputs, exactly-once
// results) and decodes every payload it reads, so workflow code, activities,
// Result, Describe, History, queries and the replay tools see plaintext. The
// database sees only what the codec made.
//
// [AESGCM] is a codec that encrypts with AES-256-GCM (or AES-128/192, by key
// length); [AESGCMKeys] adds key IDs for rotation. Implement PayloadCodec
// for anything else: a key management service, compression, both.
//
// # Envelope
//
// Payloads are JSON, and the database keeps them in jsonb columns. An encoded
// payload is stored as a JSON object of one field holding the codec's output
// in base64,
//
//	{"durable_codec":"AQAq3oVxOfrR..."}
//
// so the schema and the history export format do not change. [Wrap] makes
// the envelope and [Unwrap] opens it. Unwrap leaves a payload that is not an
// envelope alone: a codec can be turned on over a database that already holds
// plain payloads, and both kinds are read.
//
// # What is not encoded
//
// Workflow IDs, run IDs, type, queue and signal names, activity options,
// timer times, version markers (a change ID and a number from the code) and
// error messages (of failed activities, workflows and tasks) stay readable:
// the engine and the operators' tools need them. Keep secrets out of error
// messages.
//
// # Keys
//
// The key is never stored in the database: only the key ID (if any) is
// written next to each payload. Keep the key where the workers can read it
// (a secret manager, an environment variable) and the database cannot.
//
// To rotate, give [AESGCMKeys] the new key and the old ones: the new key
// encrypts, every key decrypts, each payload with the key its stored ID
// names. A payload stored without an ID (from [AESGCM], or any key without
// one) is tried with every key, so keys without an ID rotate too; errors
// name them by [Key.Fingerprint]. docs/encryption.md shows a rotation across
// a fleet of engines, step by step.
package codec

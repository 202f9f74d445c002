// Authentication and encryption of dtr's links (ZeroMQ CURVE) with one cluster key.
//
// Every process of a dtr cluster (masters, workers, process-group ranks) holds the same
// cluster key, made once by `dtr-keygen -o FILE`. With it, every link is a CURVE link:
// encrypted, and both ends prove they hold the key's secret half before a single message is
// delivered; a process with another key, or none, is refused at the handshake and nothing
// it sends is read. Without a key, links stay plain, and that is allowed only on local
// endpoints (ipc://, inproc://, tcp:// to 127.0.0.0/8, ::1 or localhost): binding or
// dialing any other address without a key is refused with an AuthenticationError that says
// what to do, unless the process was told `insecure` (for trusted networks only).
//
// Where a process finds its key, first match wins: an explicit option (`dtr-worker --key`,
// MasterOptions::key_file), $DTR_KEY_FILE (a file written by dtr-keygen), $DTR_KEY (the
// secret key itself, 40 Z85 characters). $DTR_INSECURE=1 allows plain non-local links.
// docs/security.md has the threat model and the deployment steps.
//
// Thread safety: every function here is safe from any thread; the values are plain data.
#pragma once

#include <optional>
#include <string>
#include <string_view>

namespace dtr {

// A CURVE key pair, both halves in Z85 text (40 characters each).
struct ClusterKey {
  std::string public_key;
  std::string secret_key;
};

// A fresh random key pair (libsodium through ZeroMQ). Throws AuthenticationError when this
// libzmq was built without CURVE.
ClusterKey generate_cluster_key();
// The key pair whose secret half is `secret_z85`. Throws InvalidArgument naming what is
// wrong with the text (length, characters).
ClusterKey cluster_key_from_secret(std::string_view secret_z85);
// Reads a key file written by write_key_file. Throws InvalidArgument naming the file and
// the line when it is unreadable, malformed, its two halves disagree, or it can be read
// by other users (mode must be 0600 or stricter, as ssh requires of private keys).
ClusterKey read_key_file(const std::string& path);
// Writes `key` to `path` with mode 0600. Refuses (InvalidArgument) to overwrite an
// existing file unless `overwrite`.
void write_key_file(const std::string& path, const ClusterKey& key, bool overwrite = false);

// What one process uses on its links.
struct SecurityConfig {
  std::optional<ClusterKey> key;  // set: CURVE on every link
  bool insecure = false;          // no key: allow plain links to non-local endpoints
  std::string key_source;         // where the key came from, for logs ("file /etc/dtr.key")
};

// Resolves the configuration: `key_file` when not empty, else $DTR_KEY_FILE, else $DTR_KEY;
// `insecure` or $DTR_INSECURE=1 (also "true", "yes", "on"). Throws InvalidArgument naming
// the variable or file that is malformed.
SecurityConfig resolve_security(const std::string& key_file = {}, bool insecure = false);

// True for endpoints that never leave this host: ipc://, inproc://, and tcp:// whose host
// is 127.x.x.x, ::1 or localhost. A wildcard bind ("tcp://*:5555", 0.0.0.0) is not local.
bool is_local_endpoint(std::string_view endpoint);

}  // namespace dtr

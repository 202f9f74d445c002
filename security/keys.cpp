// Cluster keys: generating, reading and writing key files, the environment, and which
// endpoints count as local.
#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>

#include <zmq.h>
#include <cctype>
#include <cerrno>
#include <cstdlib>
#include <cstring>
#include <fstream>
#include <sstream>

#include <fmt/format.h>

#include "dtr/env.hpp"
#include "dtr/error.hpp"
#include "dtr/security.hpp"

namespace dtr {

namespace {

constexpr size_t kZ85KeyLength = 40;

void require_curve() {
  if (!zmq_has("curve"))
    throw AuthenticationError(
        "this libzmq was built without CURVE (libsodium); dtr cannot authenticate links");
}

// Empty when `text` is a well-formed Z85 key, else what is wrong with it.
std::string z85_problem(std::string_view text) {
  if (text.size() != kZ85KeyLength)
    return fmt::format("a key is {} Z85 characters, this one has {}", kZ85KeyLength, text.size());
  static constexpr std::string_view kAlphabet =
      "0123456789abcdefghijklmnopqrstuvwxyzABCDEFGHIJKLMNOPQRSTUVWXYZ.-:+=^!/*?&<>()[]{}@%$#";
  for (size_t i = 0; i < text.size(); ++i)
    if (kAlphabet.find(text[i]) == std::string_view::npos)
      return fmt::format("character {} of the key is not Z85", i + 1);
  return {};
}

std::string trim(std::string_view s) {
  size_t b = 0, e = s.size();
  while (b < e && std::isspace(static_cast<unsigned char>(s[b]))) ++b;
  while (e > b && std::isspace(static_cast<unsigned char>(s[e - 1]))) --e;
  return std::string(s.substr(b, e - b));
}

}  // namespace

ClusterKey generate_cluster_key() {
  require_curve();
  char pub[kZ85KeyLength + 1];
  char sec[kZ85KeyLength + 1];
  if (zmq_curve_keypair(pub, sec) != 0)
    throw AuthenticationError(
        fmt::format("generating a CURVE key pair failed: {}", zmq_strerror(zmq_errno())));
  return ClusterKey{pub, sec};
}

ClusterKey cluster_key_from_secret(std::string_view secret_z85) {
  require_curve();
  if (std::string why = z85_problem(secret_z85); !why.empty())
    throw InvalidArgument(fmt::format("malformed secret key: {}", why));
  std::string secret(secret_z85);
  char pub[kZ85KeyLength + 1];
  if (zmq_curve_public(pub, secret.c_str()) != 0)
    throw InvalidArgument(fmt::format("malformed secret key: {}", zmq_strerror(zmq_errno())));
  return ClusterKey{pub, secret};
}

ClusterKey read_key_file(const std::string& path) {
  struct stat st {};
  if (::stat(path.c_str(), &st) != 0)
    throw InvalidArgument(fmt::format("cannot read key file {}: {}", path, std::strerror(errno)));
  if (!S_ISREG(st.st_mode))
    throw InvalidArgument(fmt::format("key file {} is not a regular file", path));
  if ((st.st_mode & 077) != 0)
    throw InvalidArgument(fmt::format(
        "key file {} can be read by other users (mode {:04o}); it holds the cluster's secret: "
        "run `chmod 600 {}`",
        path, st.st_mode & 07777, path));
  std::ifstream in(path);
  if (!in)
    throw InvalidArgument(fmt::format("cannot read key file {}: {}", path, std::strerror(errno)));
  std::string line, secret, pub;
  int number = 0;
  while (std::getline(in, line)) {
    ++number;
    if (number > 1000)
      throw InvalidArgument(fmt::format("key file {} is too long to be a dtr key file", path));
    std::string t = trim(line);
    if (t.empty() || t[0] == '#') continue;
    // name = value; Z85 values may themselves contain '=', so the name ends at the first
    // character that cannot be part of a name. (Values are never echoed: they are secret.)
    size_t end = 0;
    while (end < t.size() && (std::isalnum(static_cast<unsigned char>(t[end])) || t[end] == '-'))
      ++end;
    size_t eq = end;
    while (eq < t.size() && std::isspace(static_cast<unsigned char>(t[eq]))) ++eq;
    if (end == 0 || eq >= t.size() || t[eq] != '=')
      throw InvalidArgument(
          fmt::format("key file {} line {}: expected `name = value`", path, number));
    std::string name = t.substr(0, end);
    std::string value = trim(std::string_view(t).substr(eq + 1));
    if (name != "secret-key" && name != "public-key")
      throw InvalidArgument(fmt::format(
          "key file {} line {}: unknown entry \"{}\" (expected secret-key or public-key)", path,
          number, name.substr(0, 60)));
    if (std::string why = z85_problem(value); !why.empty())
      throw InvalidArgument(fmt::format("key file {} line {}: {}", path, number, why));
    (name == "secret-key" ? secret : pub) = value;
  }
  if (secret.empty())
    throw InvalidArgument(fmt::format("key file {} has no secret-key line", path));
  ClusterKey key = cluster_key_from_secret(secret);
  if (!pub.empty() && pub != key.public_key)
    throw InvalidArgument(
        fmt::format("key file {}: its public-key is not the public half of its secret-key", path));
  return key;
}

void write_key_file(const std::string& path, const ClusterKey& key, bool overwrite) {
  if (std::string why = z85_problem(key.secret_key); !why.empty())
    throw InvalidArgument(fmt::format("cannot write key file {}: {}", path, why));
  int flags = O_WRONLY | O_CREAT | O_CLOEXEC | (overwrite ? O_TRUNC : O_EXCL);
  int fd = ::open(path.c_str(), flags, 0600);
  if (fd < 0)
    throw InvalidArgument(fmt::format("cannot write key file {}: {}{}", path, std::strerror(errno),
                                      errno == EEXIST ? " (pass --force to replace it)" : ""));
  // An existing file keeps its mode on O_TRUNC: make sure it is private before writing.
  if (::fchmod(fd, 0600) != 0) {
    int err = errno;
    ::close(fd);
    throw InvalidArgument(
        fmt::format("cannot make key file {} private: {}", path, std::strerror(err)));
  }
  std::string text = fmt::format(
      "# dtr cluster key, written by dtr-keygen. Whoever holds this file can run masters and\n"
      "# workers of this cluster and read its traffic: keep it private (mode 0600).\n"
      "secret-key = {}\n"
      "public-key = {}\n",
      key.secret_key, key.public_key);
  size_t done = 0;
  while (done < text.size()) {
    ssize_t n = ::write(fd, text.data() + done, text.size() - done);
    if (n < 0 && errno == EINTR) continue;
    if (n <= 0) {
      int err = errno;
      ::close(fd);
      throw InvalidArgument(
          fmt::format("writing key file {} failed: {}", path, std::strerror(err)));
    }
    done += static_cast<size_t>(n);
  }
  if (::fsync(fd) != 0 || ::close(fd) != 0)
    throw InvalidArgument(
        fmt::format("writing key file {} failed: {}", path, std::strerror(errno)));
}

SecurityConfig resolve_security(const std::string& key_file, bool insecure) {
  SecurityConfig c;
  c.insecure = insecure || env_flag("DTR_INSECURE", false);
  if (!key_file.empty()) {
    c.key = read_key_file(key_file);
    c.key_source = "file " + key_file;
  } else if (const char* f = std::getenv("DTR_KEY_FILE"); f && *f) {
    c.key = read_key_file(f);
    c.key_source = fmt::format("file {} ($DTR_KEY_FILE)", f);
  } else if (const char* k = std::getenv("DTR_KEY"); k && *k) {
    try {
      c.key = cluster_key_from_secret(trim(k));
    } catch (const InvalidArgument& e) {
      throw InvalidArgument(fmt::format("$DTR_KEY: {}", e.what()));
    }
    c.key_source = "$DTR_KEY";
  }
  return c;
}

bool is_local_endpoint(std::string_view endpoint) {
  if (endpoint.starts_with("ipc://") || endpoint.starts_with("inproc://")) return true;
  if (!endpoint.starts_with("tcp://")) return false;
  std::string_view rest = endpoint.substr(6);
  // tcp://[source;]host:port — a source address names the local interface to use.
  if (size_t semi = rest.find(';'); semi != std::string_view::npos) rest = rest.substr(semi + 1);
  std::string_view host;
  if (rest.starts_with("[")) {
    size_t close = rest.find(']');
    if (close == std::string_view::npos) return false;
    host = rest.substr(1, close - 1);
  } else {
    host = rest.substr(0, rest.rfind(':'));
  }
  if (host == "localhost" || host == "::1") return true;
  // 127.0.0.0/8, written as four numbers.
  if (!host.starts_with("127.")) return false;
  int parts = 0;
  size_t i = 0;
  while (i <= host.size()) {
    size_t dot = host.find('.', i);
    if (dot == std::string_view::npos) dot = host.size();
    std::string_view part = host.substr(i, dot - i);
    if (part.empty() || part.size() > 3) return false;
    for (char ch : part)
      if (!std::isdigit(static_cast<unsigned char>(ch))) return false;
    if (std::stoi(std::string(part)) > 255) return false;
    ++parts;
    i = dot + 1;
  }
  return parts == 4;
}

}  // namespace dtr

// dtr-keygen: writes a new cluster key (a CURVE key pair) for dtr's masters, workers and
// process-group ranks. See docs/security.md.
//
// Thread safety: single-threaded.
#include <CLI/CLI.hpp>
#include <cstdio>
#include <exception>
#include <string>

#include <fmt/format.h>

#include "dtr/error.hpp"
#include "dtr/security.hpp"

int main(int argc, char** argv) {
  CLI::App app(
      "dtr-keygen: writes a new cluster key. Every master, worker and process-group rank of\n"
      "the cluster reads the same file (DTR_KEY_FILE=FILE, or dtr-worker --key FILE); with\n"
      "it, every link is encrypted and only holders of the key can connect.");
  std::string out;
  bool force = false;
  bool print_public = false;
  std::string check;
  app.add_option("-o,--output", out, "File to write (mode 0600)");
  app.add_flag("-f,--force", force, "Replace the file if it exists");
  app.add_option("--check", check, "Read an existing key file and print its public key")
      ->excludes("--output");
  app.add_flag("--public", print_public, "Also print the public key after writing");
  CLI11_PARSE(app, argc, argv);
  if (out.empty() && check.empty()) {
    std::fprintf(stderr, "dtr-keygen: give -o FILE to write a key, or --check FILE\n%s",
                 app.help().c_str());
    return 2;
  }
  try {
    if (!check.empty()) {
      dtr::ClusterKey key = dtr::read_key_file(check);
      std::printf("%s\n", key.public_key.c_str());
      return 0;
    }
    dtr::ClusterKey key = dtr::generate_cluster_key();
    dtr::write_key_file(out, key, force);
    std::fprintf(stderr,
                 "dtr-keygen: wrote %s. Copy it (mode 0600) to every node, then\n"
                 "  export DTR_KEY_FILE=%s   (masters and SPMD ranks)\n"
                 "  dtr-worker --key %s ...  (or the same variable)\n",
                 out.c_str(), out.c_str(), out.c_str());
    if (print_public) std::printf("%s\n", key.public_key.c_str());
  } catch (const dtr::Error& e) {
    std::fprintf(stderr, "dtr-keygen: %s\n", e.what());
    return 1;
  } catch (const std::exception& e) {
    std::fprintf(stderr, "dtr-keygen: %s\n", e.what());
    return 1;
  }
  return 0;
}

// The dtr-repl binary: a script file and piped stdin (same language, no prompt), exit
// statuses, --connect to running daemons, and that the local workers are stopped.
#include <doctest/doctest.h>
#include <unistd.h>

#include <cstdio>
#include <fstream>

#include "repl/repl_support.hpp"
#include "support/worker_process.hpp"

namespace {

using namespace dtr::test;

std::string temp_file(const std::string& text) {
  char tmpl[] = "/tmp/dtr-repl-test-XXXXXX";
  int fd = mkstemp(tmpl);
  REQUIRE(fd >= 0);
  close(fd);
  std::ofstream(tmpl) << text;
  return tmpl;
}

const char* kScript =
    "# a script\n"
    "x = arange(6).view(2, 3)\n"
    "with node(1):\n"
    "    y = ones(2, 3)\n"
    "\n"
    "    print(y.get_node())\n"
    "print(x.sum(1))\n"
    "x.get_node()\n"
    ":nodes\n";

TEST_CASE("a script file runs without a prompt and exits 0") {
  std::string file = temp_file(kScript);
  ProcessResult r = run_repl({file}, "");
  std::remove(file.c_str());
  INFO("stdout:\n", r.out, "\nstderr:\n", r.err);
  CHECK(r.exit_code() == 0);
  CHECK(r.err.empty());
  CHECK(r.out.rfind("1\ntensor([ 3, 12], shape=[2], dtype=int64, node=0, device=cpu)\n0\n"
                    "node 0 (current)  worker ",
                    0) == 0);
  CHECK_FALSE(has(r.out, ">>>"));
  std::vector<pid_t> pids = worker_pids(r.out);
  CHECK(pids.size() == 2);
  CHECK(all_gone(pids));  // the local workers were stopped

  file = temp_file("print(1)\nprint(nope)\nprint(3)\n");
  r = run_repl({"--workers", "1", file}, "");
  CHECK(r.exit_code() == 1);
  CHECK(r.out == "1\n3\n");
  CHECK(r.err == file + ":2: NameError: name 'nope' is not defined; did you mean 'node'?\n");
  std::remove(file.c_str());
}

TEST_CASE("piped stdin runs the same language and a failed line gives exit status 1") {
  ProcessResult r = run_repl({"--workers", "1"},
                             "a = [1, 2, 3]\n"
                             "b = a.pow(-1)\n"
                             "print(b)\n"
                             "x = (1 +* 2)\n"
                             "print(a.sum())\n");
  INFO("stdout:\n", r.out, "\nstderr:\n", r.err);
  CHECK(r.exit_code() == 1);
  CHECK(r.out == "tensor(6, shape=[], dtype=int64, node=0, device=cpu)\n");
  CHECK(has(r.err, "<stdin>:3: RemoteError: pow failed on node 0 (cpu)"));
  CHECK(has(r.err,
            "<stdin>:4: SyntaxError: expected an expression, found '*' (column 9)\n"
            "  x = (1 +* 2)\n"
            "          ^\n"));
}

TEST_CASE("stop-on-error and exit(n) and help and bad arguments") {
  ProcessResult r = run_repl({"--workers", "1", "--stop-on-error"}, "foo\nprint(1)\n");
  CHECK(r.exit_code() == 1);
  CHECK(r.out.empty());
  CHECK(has(r.err, "<stdin>:1: NameError: name 'foo' is not defined"));

  r = run_repl({"--workers", "1"}, "print(1)\nexit(4)\nprint(2)\n");
  CHECK(r.exit_code() == 4);
  CHECK(r.out == "1\n");

  r = run_repl({"--help"}, "");
  CHECK(r.exit_code() == 0);
  CHECK(has(r.out, "--workers"));
  CHECK(has(r.out, "--connect"));
  CHECK(has(r.out, "a script statement failed"));

  r = run_repl({"--workers", "2", "--connect", "tcp://127.0.0.1:1"}, "");
  CHECK(r.exit_code() != 0);
  r = run_repl({"/nonexistent/script.dtr"}, "");
  CHECK(r.exit_code() == 2);
  CHECK(r.err == "dtr-repl: cannot read /nonexistent/script.dtr\n");
}

TEST_CASE("--connect attaches to running daemons and leaves them running") {
  WorkerProcess w0, w1;
  ProcessResult r = run_repl({"--connect", w0.endpoint() + "," + w1.endpoint()},
                             "with node(1): print(arange(3).get_node())\nnode_count()\n");
  INFO("stderr:\n", r.err);
  CHECK(r.exit_code() == 0);
  CHECK(r.out == "1\n2\n");
  CHECK(w0.running());
  CHECK(w1.running());
}

TEST_CASE("a script FILE and --connect go in either order; the endpoint list is trimmed") {
  WorkerProcess w0, w1;
  std::string file = temp_file("print(node_count())\n");
  const std::string list = w0.endpoint() + ", " + w1.endpoint();
  for (const std::vector<std::string>& args : {std::vector<std::string>{"--connect", list, file},
                                               std::vector<std::string>{file, "--connect", list}}) {
    ProcessResult r = run_repl(args, "");
    INFO("stderr:\n", r.err);
    CHECK(r.exit_code() == 0);
    CHECK(r.out == "2\n");
  }
  std::remove(file.c_str());
}

TEST_CASE("workers that cannot be reached give exit status 2 and a message") {
  int port = free_port();
  ProcessResult r = run_repl(
      {"--connect", "tcp://127.0.0.1:" + std::to_string(port), "--connect-timeout", "0.5"}, "");
  CHECK(r.exit_code() == 2);
  CHECK(has(r.err, "dtr-repl: "));
}

}  // namespace

// doctest's main for the process-group tests: after the run, the mpi harness's group is
// freed, so that MPI is finalized at exit (tests/pg/pg_test_util.hpp).
#define DOCTEST_CONFIG_IMPLEMENT
#include <doctest/doctest.h>

#include "pg_test_util.hpp"

int main(int argc, char** argv) {
  doctest::Context context(argc, argv);
  const int rc = context.run();
  dtr::pgtest::release_mpi_sync_group();
  return rc;
}

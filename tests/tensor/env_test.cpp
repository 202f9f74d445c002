// dtr/env.hpp: a DTR_* switch is understood or refused, never silently taken as its default
// (issue 40's sweep: DTR_SAME_HOST=false, DTR_LANES=off, DTR_TUNE_MALLOC=no and
// DTR_NUM_THREADS=abc were each ignored; DTR_INSECURE=2 meant "no").
#include <doctest/doctest.h>
#include <stdlib.h>

#include <string>

#include "dtr/env.hpp"

namespace {

struct Env {
  explicit Env(const char* value) {
    if (value)
      setenv("DTR_ENV_TEST", value, 1);
    else
      unsetenv("DTR_ENV_TEST");
  }
  ~Env() { unsetenv("DTR_ENV_TEST"); }
};

TEST_CASE("env_flag: the usual spellings either way, the default when unset, else refused") {
  for (const char* yes : {"1", "true", "TRUE", "yes", "On"}) {
    Env e(yes);
    CHECK(dtr::env_flag("DTR_ENV_TEST", false));
  }
  for (const char* no : {"0", "false", "No", "OFF"}) {
    Env e(no);
    CHECK_FALSE(dtr::env_flag("DTR_ENV_TEST", true));
  }
  {
    Env e(nullptr);
    CHECK(dtr::env_flag("DTR_ENV_TEST", true));
  }
  {
    Env e("");
    CHECK_FALSE(dtr::env_flag("DTR_ENV_TEST", false));
  }
  for (const char* bad : {"flase", "2", "enable", " 1"}) {
    Env e(bad);
    CHECK_THROWS_WITH_AS(
        dtr::env_flag("DTR_ENV_TEST", true),
        (std::string("DTR_ENV_TEST='") + bad + "': expected 1/true/yes/on or 0/false/no/off")
            .c_str(),
        dtr::InvalidArgument);
  }
}

TEST_CASE("env_count: a positive integer, the default when unset, else refused") {
  {
    Env e("8");
    CHECK(dtr::env_count("DTR_ENV_TEST", 1) == 8);
  }
  {
    Env e(nullptr);
    CHECK(dtr::env_count("DTR_ENV_TEST", 3) == 3);
  }
  for (const char* bad : {"0", "-2", "abc", "4x", "99999999999999999999"}) {
    Env e(bad);
    CHECK_THROWS_AS(dtr::env_count("DTR_ENV_TEST", 1), dtr::InvalidArgument);
  }
}

}  // namespace

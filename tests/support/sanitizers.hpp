// Test support: which sanitizer this build has, for the tests that size their work by it.
// g++ defines __SANITIZE_ADDRESS__ / __SANITIZE_THREAD__; clang (the ASan build's compiler,
// scripts/test.sh) says so through __has_feature instead.
//
// Thread safety: macros only.
#pragma once

#if defined(__SANITIZE_ADDRESS__)
#define DTR_TEST_ASAN 1
#elif defined(__has_feature)
#if __has_feature(address_sanitizer)
#define DTR_TEST_ASAN 1
#endif
#endif

#if defined(__SANITIZE_THREAD__)
#define DTR_TEST_TSAN 1
#elif defined(__has_feature)
#if __has_feature(thread_sanitizer)
#define DTR_TEST_TSAN 1
#endif
#endif

// Clang's thread-safety attributes
// (https://clang.llvm.org/docs/ThreadSafetyAnalysis.html), checked when the
// code is compiled by clang with -Wthread-safety (scripts/test does, with
// -Werror=thread-safety); other compilers see nothing.
//
// Prefixed with HPO_: gRPC's headers pull in Abseil's unprefixed GUARDED_BY
// and friends, and a second definition of the same name would clash.
//
// The mutexes they name are hpo::Mutex (common/mutex.h): libstdc++'s
// std::mutex carries no attributes, so the analysis cannot see it taken.
#pragma once

#if defined(__clang__)
#define HPO_THREAD_ANNOTATION_(x) __attribute__((x))
#else
#define HPO_THREAD_ANNOTATION_(x)
#endif

// A class that is a lock (hpo::Mutex).
#define HPO_CAPABILITY(name) HPO_THREAD_ANNOTATION_(capability(name))
// An RAII class that holds a lock for its lifetime (hpo::MutexLock).
#define HPO_SCOPED_CAPABILITY HPO_THREAD_ANNOTATION_(scoped_lockable)

// A member read or written only with the lock held.
#define HPO_GUARDED_BY(mu) HPO_THREAD_ANNOTATION_(guarded_by(mu))
// A pointer member whose pointee is read or written only with the lock held.
#define HPO_PT_GUARDED_BY(mu) HPO_THREAD_ANNOTATION_(pt_guarded_by(mu))

// A function the caller calls with the lock(s) held (REQUIRES), or not
// held (EXCLUDES: the function takes them itself).
#define HPO_REQUIRES(...) HPO_THREAD_ANNOTATION_(requires_capability(__VA_ARGS__))
#define HPO_EXCLUDES(...) HPO_THREAD_ANNOTATION_(locks_excluded(__VA_ARGS__))

// A function that takes the lock(s) and returns with them held, releases
// them, or takes them when it returns `result` (a try-lock).
#define HPO_ACQUIRE(...) HPO_THREAD_ANNOTATION_(acquire_capability(__VA_ARGS__))
#define HPO_RELEASE(...) HPO_THREAD_ANNOTATION_(release_capability(__VA_ARGS__))
#define HPO_TRY_ACQUIRE(...) HPO_THREAD_ANNOTATION_(try_acquire_capability(__VA_ARGS__))

// A function that returns only if the lock is held (the analysis takes it
// as held from there on, to the end of the scope).
#define HPO_ASSERT_CAPABILITY(x) HPO_THREAD_ANNOTATION_(assert_capability(x))

// Turns the analysis off for one function: for code it cannot follow. Say
// why next to each use.
#define HPO_NO_THREAD_SAFETY_ANALYSIS HPO_THREAD_ANNOTATION_(no_thread_safety_analysis)

// A 32-bit word that threads of any process mapping it can sleep on until it moves (Linux
// futex, not FUTEX_PRIVATE: the word may live in a /dev/shm mapping). The group's waits and a
// /dev/shm job's start sleep on one.
#pragma once

#include <atomic>
#include <chrono>
#include <cstdint>

namespace hogstream {

// Sleeps while *word still holds `seen`, `most` at the longest (returns at once when it already
// moved; spuriously now and then): the caller rechecks its condition either way.
void FutexWait(const std::atomic<uint32_t>& word, uint32_t seen, std::chrono::nanoseconds most);
// Wakes every sleeper on *word, in every process (after the writer moved it).
void FutexWakeAll(std::atomic<uint32_t>& word);

static_assert(sizeof(std::atomic<uint32_t>) == sizeof(uint32_t), "a futex word is a plain 32-bit word");

}  // namespace hogstream

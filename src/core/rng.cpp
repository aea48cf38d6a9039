#include "core/rng.h"

#include <cmath>
#include <numbers>

namespace nanoddp {

namespace {
// splitmix64's increment, 2^64 / the golden ratio (odd): its multiples spread over all 64 bits.
constexpr uint64_t kGolden = 0x9e3779b97f4a7c15ull;

// Vigna's splitmix64, the seeding xoshiro's authors recommend: any seed, 0 included, gives a
// well-mixed state (xoshiro must never be all zeros).
uint64_t splitmix64(uint64_t& x) {
  uint64_t z = (x += kGolden);
  z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ull;
  z = (z ^ (z >> 27)) * 0x94d049bb133111ebull;
  return z ^ (z >> 31);
}
uint64_t rotl(uint64_t x, int k) { return (x << k) | (x >> (64 - k)); }
}  // namespace

Rng::Rng(uint64_t seed, uint64_t stream) {
  // The odd multiplier spreads small stream ids over all 64 bits; a plain seed ^ stream would give
  // (seed 1, stream 0) and (seed 0, stream 1) the same sequence.
  uint64_t x = seed ^ (stream * 0xd1342543de82ef95ull);
  for (auto& w : s_) w = splitmix64(x);
}

// xoshiro256** 1.0, step for step as in Blackman and Vigna's reference code.
uint64_t Rng::next_u64() {
  uint64_t result = rotl(s_[1] * 5, 7) * 9;
  uint64_t t = s_[1] << 17;
  s_[2] ^= s_[0];
  s_[3] ^= s_[1];
  s_[1] ^= s_[2];
  s_[0] ^= s_[3];
  s_[2] ^= t;
  s_[3] = rotl(s_[3], 45);
  return result;
}

// The top 24 bits: a float holds them exactly, so the result never rounds up to 1.
float Rng::uniform() { return static_cast<float>(next_u64() >> 40) * 0x1.0p-24f; }

float Rng::normal() {
  // Box-Muller on (0, 1] x [0, 1); one of the pair is dropped so the state stays four words.
  double u1 = (static_cast<double>(next_u64() >> 11) + 1.0) * 0x1.0p-53;
  double u2 = static_cast<double>(next_u64() >> 11) * 0x1.0p-53;
  return static_cast<float>(std::sqrt(-2.0 * std::log(u1)) * std::cos(2.0 * std::numbers::pi * u2));
}

uint64_t stream_seed(uint64_t seed, uint64_t stream) { return seed ^ (kGolden * (stream + 1)); }

uint64_t stream_id(std::string_view name) {
  // FNV-1a's 64-bit offset basis and prime. Not std::hash: its values may change between library
  // versions, and a stream id must not (it decides the weights a seed gives).
  uint64_t h = 0xcbf29ce484222325ull;
  for (unsigned char c : name) h = (h ^ c) * 0x100000001b3ull;
  return h;
}

}  // namespace nanoddp

// "Did you mean": the nearest of the valid words to a mistyped one (an unknown subcommand or flag),
// so a typo gets the fix instead of only "not expected".
#pragma once

#include <algorithm>
#include <string>
#include <vector>

namespace nanoddp::cli {

// Edit distance with adjacent transpositions counted as one edit (optimal string alignment): the
// common typos -- a swapped pair ("dpeth"), a missing, extra or wrong letter -- are each one edit.
inline size_t typo_distance(const std::string& a, const std::string& b) {
  const size_t n = a.size(), m = b.size();
  std::vector<std::vector<size_t>> d(n + 1, std::vector<size_t>(m + 1));
  for (size_t i = 0; i <= n; i++) d[i][0] = i;
  for (size_t j = 0; j <= m; j++) d[0][j] = j;
  for (size_t i = 1; i <= n; i++) {
    for (size_t j = 1; j <= m; j++) {
      d[i][j] = std::min({d[i - 1][j] + 1, d[i][j - 1] + 1, d[i - 1][j - 1] + (a[i - 1] == b[j - 1] ? 0 : 1)});
      if (i > 1 && j > 1 && a[i - 1] == b[j - 2] && a[i - 2] == b[j - 1]) d[i][j] = std::min(d[i][j], d[i - 2][j - 2] + 1);
    }
  }
  return d[n][m];
}

// The choice nearest to `word`, if it is near enough to be what was meant (at most a third of the
// word's letters wrong, and at least one edit allowed); "" otherwise. Dashes and underscores count
// alike (--device-batch-size is --device_batch_size).
inline std::string nearest_choice(const std::string& word, const std::vector<std::string>& choices) {
  auto norm = [](std::string s) {
    std::replace(s.begin(), s.end(), '-', '_');
    return s;
  };
  const std::string w = norm(word);
  std::string best;
  size_t best_d = std::max<size_t>(1, w.size() / 3) + 1;
  for (const auto& c : choices) {
    const size_t d = typo_distance(w, norm(c));
    if (d < best_d) {
      best_d = d;
      best = c;
    }
  }
  return best;
}

}  // namespace nanoddp::cli

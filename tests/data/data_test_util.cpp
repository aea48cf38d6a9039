#include "data_test_util.h"

#include <unistd.h>

#include <filesystem>
#include <fstream>
#include <map>
#include <algorithm>
#include <cctype>

#include "core/rng.h"
#include "data/bpe_trainer.h"
#include "data/corpora.h"
#include "data/tokenizer_file.h"
#include "test_util.h"

namespace nanoddp::testing {

std::string missing_node_reference() {
  if (run_command("node --version").status != 0) return "node is not installed (scripts/setup.sh installs it)";
  return missing_npm_package("tiktoken");
}

std::string missing_npm_package(const std::string& package) {
  try {
    data::npm_package_dir(package);
    return "";
  } catch (const Error& e) {
    return e.what();
  }
}

namespace {

// Appends code point cp as UTF-8.
void put_utf8(std::string& s, uint32_t cp) {
  if (cp < 0x80) {
    s += static_cast<char>(cp);
  } else if (cp < 0x800) {
    s += static_cast<char>(0xc0 | (cp >> 6));
    s += static_cast<char>(0x80 | (cp & 0x3f));
  } else if (cp < 0x10000) {
    s += static_cast<char>(0xe0 | (cp >> 12));
    s += static_cast<char>(0x80 | ((cp >> 6) & 0x3f));
    s += static_cast<char>(0x80 | (cp & 0x3f));
  } else {
    s += static_cast<char>(0xf0 | (cp >> 18));
    s += static_cast<char>(0x80 | ((cp >> 12) & 0x3f));
    s += static_cast<char>(0x80 | ((cp >> 6) & 0x3f));
    s += static_cast<char>(0x80 | (cp & 0x3f));
  }
}

std::string utf8(std::initializer_list<uint32_t> cps) {
  std::string s;
  for (uint32_t cp : cps) put_utf8(s, cp);
  return s;
}

}  // namespace

std::vector<std::string> generated_documents(int docs, int words, uint64_t seed) {
  static const char* syllables[] = {"the", "an", "ing", "er", "on", "re", "st", "qu", "ta", "lo", "mi", "ka",
                                    "ed",  "s",  "ly",  "pr", "ou", "ch", "ea", "th", "io", "nd", "ve", "al"};
  static const char* punct[] = {",", ".", "!", "?", ";", " --", "'s", "'ll", "\"", "(", ")"};
  Rng rng(seed);
  // A vocabulary of 400 words; word w is drawn with probability ~ 1/(w+1) (Zipf).
  std::vector<std::string> lexicon;
  for (int w = 0; w < 400; w++) {
    std::string word;
    const int n = 1 + static_cast<int>(rng.next_u64() % 4);
    for (int k = 0; k < n; k++) word += syllables[rng.next_u64() % std::size(syllables)];
    if (rng.next_u64() % 5 == 0) word[0] = static_cast<char>(std::toupper(word[0]));
    lexicon.push_back(word);
  }
  std::vector<double> cdf;
  double total = 0;
  for (int w = 0; w < 400; w++) cdf.push_back(total += 1.0 / (w + 1));
  std::vector<std::string> out;
  for (int d = 0; d < docs; d++) {
    std::string text;
    for (int i = 0; i < words; i++) {
      const double u = rng.uniform() * total;
      const size_t w = std::lower_bound(cdf.begin(), cdf.end(), u) - cdf.begin();
      if (!text.empty()) text += ' ';
      text += lexicon[std::min<size_t>(w, 399)];
      const uint64_t r = rng.next_u64() % 100;
      if (r < 12) text += punct[r % std::size(punct)];
      else if (r < 14) text.append(" ").append(std::to_string(rng.next_u64() % 100000));
      else if (r < 16) text += "\n";
      else if (r == 16) text += "\n\n";
    }
    out.push_back(text);
  }
  return out;
}

std::vector<std::string> adversarial_strings() {
  std::vector<std::string> s = {
      "",
      "1234567890123456789012345678901234567890 12 123 1234 12345 0.5 3,141,592 1e10 007",
      std::string(1000, '9'),
      "     leading and trailing spaces     ",
      "tabs\t\tand\t \tmixed \t whitespace\r\n\r\n\n\n  \n\t\n",
      std::string(500, ' ') + "x" + std::string(501, ' '),
      std::string(300, '\n') + "y" + std::string(77, '\r') + std::string(5, '\t'),
      "don't DON'T You'll I'M we'VE they'Re it'S he'd SHE'D o'clock 'tis ''quoted'' '",
      "!!!!!!!????...,,,;;;:::---___***+++===<<<>>>|||\\\\///" + std::string(200, '.'),
      "<|endoftext|> <|bos|> <|fim_prefix|> <|endofprompt|> look like special tokens but are text",
      "camelCaseWords PascalCase snake_case SCREAMING_CASE kebab-case MiXeD",
      "https://example.com/path?query=1&x=y#frag user@example.org C:\\Users\\name",
      "def f(x):\n    return {'a': [1, 2, 3]}  # comment\n\tif x >= 0 and y != 2: pass\n",
  };
  // Mixed scripts, combining marks, case folding specials (U+017F LONG S, U+212A KELVIN SIGN).
  s.push_back("Ελληνικά κείμενα, русский текст, עברית, العربية, हिन्दी, ไทย, 한국어, 日本語のテキスト, 中文文本。");
  s.push_back("e" + utf8({0x301}) + " a" + utf8({0x308, 0x323}) + " " + utf8({0x915, 0x94d, 0x937}) + " Zalgo" +
              utf8({0x30d, 0x30e, 0x304, 0x305, 0x33f, 0x311, 0x306, 0x310}));
  s.push_back("'" + utf8({0x17f}) + " '" + utf8({0x212a}) + " it'" + utf8({0x17f}) + " " + utf8({0x212a}) + "elvin " +
              utf8({0x130, 0x131}) + " " + utf8({0xdf}) + " " + utf8({0x1e9e}));
  // Emoji: ZWJ family, skin tones, flags, keycaps, variation selectors.
  s.push_back(utf8({0x1f468, 0x200d, 0x1f469, 0x200d, 0x1f467, 0x200d, 0x1f466}) + " " + utf8({0x1f44d, 0x1f3fd}) +
              " " + utf8({0x1f1fa, 0x1f1f8, 0x1f1ef, 0x1f1f5}) + " " + utf8({0x31, 0xfe0f, 0x20e3}) + " " +
              utf8({0x2764, 0xfe0f}) + "!!" + utf8({0x1f600, 0x1f600, 0x1f600}) + "text" + utf8({0x1f525}));
  // Unicode whitespace of every kind between words, and U+180E / U+200B / U+FEFF (not White_Space).
  std::string ws = "a";
  for (uint32_t cp : {0x85u, 0xa0u, 0x1680u, 0x2000u, 0x2005u, 0x200au, 0x2028u, 0x2029u, 0x202fu, 0x205fu, 0x3000u,
                      0x180eu, 0x200bu, 0xfeffu, 0x0bu, 0x0cu, 0x1cu, 0x1fu}) {
    put_utf8(ws, cp);
    ws += "b";
    put_utf8(ws, cp);
    put_utf8(ws, cp);
    ws += " c\n";
    put_utf8(ws, cp);
  }
  s.push_back(ws);
  // Numbers in other scripts: Arabic-Indic, Devanagari, fullwidth, superscripts, Roman numerals.
  s.push_back(utf8({0x661, 0x662, 0x663, 0x664, 0x665}) + " " + utf8({0x967, 0x968, 0x969, 0x96a}) + " " +
              utf8({0xff11, 0xff12, 0xff13, 0xff14}) + " x" + utf8({0xb2, 0xb3, 0xb9}) + " " +
              utf8({0x2160, 0x2161, 0x2162, 0x2163}) + " " + utf8({0xbd, 0x2153}));
  for (uint64_t seed = 1; seed <= 40; seed++) s.push_back(random_unicode_text(400 + 50 * seed, seed));
  return s;
}

std::string random_unicode_text(size_t chars, uint64_t seed) {
  // [first, last] code point ranges, all assigned before Unicode 14 (what PCRE2 10.42 knows) or
  // unassigned in every version since.
  static const std::pair<uint32_t, uint32_t> blocks[] = {
      {0x20, 0x7e},     {0xa0, 0x24f},    {0x300, 0x36f},   {0x370, 0x3ff},   {0x400, 0x4ff},
      {0x5d0, 0x5ea},   {0x620, 0x64a},   {0x660, 0x669},   {0x900, 0x97f},   {0xe01, 0xe3a},
      {0x2000, 0x206f}, {0x2100, 0x218b}, {0x2200, 0x22ff}, {0x3000, 0x303f}, {0x3041, 0x3096},
      {0x4e00, 0x4fff}, {0xac00, 0xadff}, {0xff01, 0xff5e}, {0x1f300, 0x1f5ff}, {0x1f600, 0x1f64f}};
  Rng rng(seed, 7);
  std::string s;
  for (size_t i = 0; i < chars; i++) {
    const uint64_t r = rng.next_u64();
    if (r % 3 == 0) {  // ASCII words and spaces dominate real text
      s += " etaoinshrdlu0123456789\n,.'"[r / 3 % 27];
      continue;
    }
    const auto& [lo, hi] = blocks[r / 3 % std::size(blocks)];
    put_utf8(s, lo + static_cast<uint32_t>(rng.next_u64() % (hi - lo + 1)));
  }
  return s;
}

std::string random_bytes(size_t n, uint64_t seed) {
  Rng rng(seed, 11);
  std::string s;
  while (s.size() < n) {
    const uint64_t r = rng.next_u64();
    switch (r % 6) {
      case 0: s += static_cast<char>(0x80 + r / 8 % 0x80); break;    // stray continuation byte
      case 1: s += static_cast<char>(0xc0 + r / 8 % 0x40); break;    // lead byte, maybe unfinished
      case 2: s += "\xf0\x9f\x98"; break;                            // a truncated emoji
      case 3: s += random_unicode_text(3, r); break;
      default: s += " the and of"[r / 8 % 11]; break;
    }
  }
  return s;
}

data::BpeVocab small_trained_vocab(int vocab_size) {
  static std::map<int, data::BpeVocab> cache;  // training is cheap, but several tests use the same one
  auto it = cache.find(vocab_size);
  if (it != cache.end()) return it->second;
  // ctest runs tests as parallel processes: each needs its own directory.
  ScratchDir dir("small_trained_vocab_" + std::to_string(::getpid()));
  std::ofstream out(dir.str("corpus.txt"), std::ios::binary);
  for (const auto& d : generated_documents(20, 2000, 42)) out << d << "\n";
  out.close();
  data::BpeTrainOptions opt;
  opt.input = {dir.str("corpus.txt")};
  opt.vocab_size = vocab_size;
  data::BpeVocab v = data::train_bpe(opt);
  v.name = "small_trained_vocab";
  return cache[vocab_size] = v;
}

void write_docs_file(const std::string& path, const std::vector<std::string>& docs) {
  std::ofstream out(path, std::ios::binary);
  for (const auto& d : docs) {
    const uint32_t n = static_cast<uint32_t>(d.size());
    out.write(reinterpret_cast<const char*>(&n), 4);
    out.write(d.data(), static_cast<std::streamsize>(d.size()));
  }
  ASSERT_TRUE(out.good()) << "cannot write " << path;
}

std::vector<std::vector<uint32_t>> read_u32_arrays(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  std::vector<std::vector<uint32_t>> out;
  uint32_t n;
  while (in.read(reinterpret_cast<char*>(&n), 4)) {
    std::vector<uint32_t> a(n);
    in.read(reinterpret_cast<char*>(a.data()), static_cast<std::streamsize>(n) * 4);
    out.push_back(std::move(a));
  }
  return out;
}

bool run_node_reference(const std::string& args) {
  const std::string cmd = "node " + std::string(NANODDP_SOURCE_DIR) + "/tools/tiktoken_reference.mjs " + args;
  const CommandResult r = run_command(cmd);
  EXPECT_EQ(r.status, 0) << cmd << "\n" << r.output;
  return r.status == 0;
}

std::vector<std::string> corpus_documents(const std::string& name) {
  std::vector<std::string> docs;
  data::for_each_corpus_document(name, "", [&](std::string&& d) { docs.push_back(std::move(d)); });
  return docs;
}

}  // namespace nanoddp::testing

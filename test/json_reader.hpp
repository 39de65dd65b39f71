// A strict little JSON reader for tests that check what our programs write (--stats_json,
// segment_bench --json): objects, arrays, strings (\" \\ \uXXXX kept as-is), numbers, true,
// false, null. Throws std::runtime_error on anything malformed or trailing.
#pragma once

#include <cctype>
#include <cstring>
#include <cstdlib>
#include <map>
#include <memory>
#include <stdexcept>
#include <string>
#include <vector>

namespace hogstream::test {

struct Json {
  enum Kind { NUL, BOOL, NUMBER, STRING, ARRAY, OBJECT } kind = NUL;
  bool b = false;
  double num = 0;
  std::string str;
  std::vector<Json> arr;
  std::map<std::string, Json> obj;

  bool has(const std::string& k) const { return kind == OBJECT && obj.count(k); }
  const Json& operator[](const std::string& k) const {
    if (!has(k)) throw std::runtime_error("no key '" + k + "'");
    return obj.at(k);
  }

  static Json Parse(const std::string& text) {
    size_t p = 0;
    Json v = Value(text, p);
    Space(text, p);
    if (p != text.size()) throw std::runtime_error("trailing text at " + std::to_string(p));
    return v;
  }

 private:
  static void Space(const std::string& s, size_t& p) {
    while (p < s.size() && std::isspace(static_cast<unsigned char>(s[p]))) ++p;
  }
  static void Expect(const std::string& s, size_t& p, char c) {
    Space(s, p);
    if (p >= s.size() || s[p] != c) throw std::runtime_error(std::string("expected '") + c + "' at " + std::to_string(p));
    ++p;
  }
  static std::string String(const std::string& s, size_t& p) {
    Expect(s, p, '"');
    std::string out;
    while (p < s.size() && s[p] != '"') {
      if (static_cast<unsigned char>(s[p]) < 0x20) throw std::runtime_error("control character in string");
      if (s[p] == '\\') {
        if (++p >= s.size()) break;
        if (s[p] == 'u') {
          if (p + 4 >= s.size()) throw std::runtime_error("short \\u escape");
          out += s.substr(p - 1, 6);
          p += 5;
          continue;
        }
        if (!std::strchr("\"\\/bfnrt", s[p])) throw std::runtime_error("bad escape");
      }
      out += s[p++];
    }
    Expect(s, p, '"');
    return out;
  }
  static Json Value(const std::string& s, size_t& p) {
    Space(s, p);
    if (p >= s.size()) throw std::runtime_error("unexpected end");
    Json v;
    const char c = s[p];
    if (c == '{') {
      v.kind = OBJECT;
      ++p;
      Space(s, p);
      if (p < s.size() && s[p] == '}') return ++p, v;
      for (;;) {
        const std::string k = String(s, p);
        Expect(s, p, ':');
        if (v.obj.count(k)) throw std::runtime_error("duplicate key '" + k + "'");
        v.obj[k] = Value(s, p);
        Space(s, p);
        if (p < s.size() && s[p] == ',') { ++p; continue; }
        Expect(s, p, '}');
        return v;
      }
    }
    if (c == '[') {
      v.kind = ARRAY;
      ++p;
      Space(s, p);
      if (p < s.size() && s[p] == ']') return ++p, v;
      for (;;) {
        v.arr.push_back(Value(s, p));
        Space(s, p);
        if (p < s.size() && s[p] == ',') { ++p; continue; }
        Expect(s, p, ']');
        return v;
      }
    }
    if (c == '"') {
      v.kind = STRING;
      v.str = String(s, p);
      return v;
    }
    for (const char* word : {"true", "false", "null"}) {
      if (s.compare(p, std::strlen(word), word) == 0) {
        p += std::strlen(word);
        v.kind = word[0] == 'n' ? NUL : BOOL;
        v.b = word[0] == 't';
        return v;
      }
    }
    const char* begin = s.c_str() + p;
    char* end = nullptr;
    v.num = std::strtod(begin, &end);
    // JSON has no nan, inf, hex or leading '+'.
    if (end == begin || c == '+' || std::isalpha(static_cast<unsigned char>(c)) ||
        std::string(begin, static_cast<const char*>(end)).find_first_of("xXnNiI") != std::string::npos)
      throw std::runtime_error("bad value at " + std::to_string(p));
    v.kind = NUMBER;
    p += static_cast<size_t>(end - begin);
    return v;
  }
};

}  // namespace hogstream::test

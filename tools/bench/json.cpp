// Minimal JSON value, writer and reader (see json.hpp for the contract).
#include "json.hpp"

#include <charconv>
#include <cmath>
#include <cstdio>
#include <stdexcept>
#include <utility>

namespace remora::bench::json {

Value::Value(bool b) : kind_(Kind::Bool), bool_(b) {}
Value::Value(double n) : kind_(Kind::Number), number_(n) {}
Value::Value(int n) : kind_(Kind::Number), number_(n) {}
Value::Value(std::string s) : kind_(Kind::String), string_(std::move(s)) {}
Value::Value(const char* s) : kind_(Kind::String), string_(s) {}

Value Value::array() {
  Value v;
  v.kind_ = Kind::Array;
  return v;
}

Value Value::object() {
  Value v;
  v.kind_ = Kind::Object;
  return v;
}

bool Value::as_bool(bool fallback) const { return kind_ == Kind::Bool ? bool_ : fallback; }
double Value::as_number(double fallback) const {
  return kind_ == Kind::Number ? number_ : fallback;
}
const std::string& Value::as_string() const {
  static const std::string empty;
  return kind_ == Kind::String ? string_ : empty;
}
const std::vector<Value>& Value::items() const { return items_; }
const std::vector<Member>& Value::members() const { return members_; }

Value& Value::push(Value v) {
  if (kind_ != Kind::Array) throw std::logic_error("json: push on a non-array");
  items_.push_back(std::move(v));
  return *this;
}

Value& Value::set(std::string key, Value v) {
  if (kind_ != Kind::Object) throw std::logic_error("json: set on a non-object");
  for (auto& m : members_) {
    if (m.key == key) {
      m.value = std::move(v);
      return *this;
    }
  }
  members_.push_back(Member{std::move(key), std::move(v)});
  return *this;
}

const Value* Value::find(std::string_view key) const {
  if (kind_ != Kind::Object) return nullptr;
  for (const auto& m : members_) {
    if (m.key == key) return &m.value;
  }
  return nullptr;
}

namespace {

void write_string(std::string& out, const std::string& s) {
  out += '"';
  for (unsigned char c : s) {
    switch (c) {
      case '"': out += "\\\""; break;
      case '\\': out += "\\\\"; break;
      case '\n': out += "\\n"; break;
      case '\r': out += "\\r"; break;
      case '\t': out += "\\t"; break;
      default:
        if (c < 0x20) {
          char buf[8];
          std::snprintf(buf, sizeof buf, "\\u%04x", c);
          out += buf;
        } else {
          out += static_cast<char>(c);
        }
    }
  }
  out += '"';
}

void write(std::string& out, const Value& v, int indent, int depth) {
  auto newline = [&](int d) {
    if (indent <= 0) return;
    out += '\n';
    out.append(static_cast<size_t>(indent * d), ' ');
  };
  switch (v.kind()) {
    case Value::Kind::Null: out += "null"; break;
    case Value::Kind::Bool: out += v.as_bool() ? "true" : "false"; break;
    case Value::Kind::Number: {
      double n = v.as_number();
      if (!std::isfinite(n)) {
        out += "null";
        break;
      }
      char buf[32];
      auto res = std::to_chars(buf, buf + sizeof buf, n);
      out.append(buf, res.ptr);
      break;
    }
    case Value::Kind::String: write_string(out, v.as_string()); break;
    case Value::Kind::Array: {
      out += '[';
      bool first = true;
      for (const auto& item : v.items()) {
        if (!first) out += ',';
        first = false;
        newline(depth + 1);
        write(out, item, indent, depth + 1);
      }
      if (!v.items().empty()) newline(depth);
      out += ']';
      break;
    }
    case Value::Kind::Object: {
      out += '{';
      bool first = true;
      for (const auto& m : v.members()) {
        if (!first) out += ',';
        first = false;
        newline(depth + 1);
        write_string(out, m.key);
        out += indent > 0 ? ": " : ":";
        write(out, m.value, indent, depth + 1);
      }
      if (!v.members().empty()) newline(depth);
      out += '}';
      break;
    }
  }
}

class Parser {
 public:
  explicit Parser(std::string_view text) : s_(text) {}

  Value document() {
    Value v = value(0);
    skip_ws();
    if (pos_ != s_.size()) fail("trailing characters");
    return v;
  }

 private:
  [[noreturn]] void fail(const char* what) const {
    throw std::runtime_error("json: " + std::string(what) + " at offset " + std::to_string(pos_));
  }
  void skip_ws() {
    while (pos_ < s_.size() &&
           (s_[pos_] == ' ' || s_[pos_] == '\n' || s_[pos_] == '\r' || s_[pos_] == '\t')) {
      ++pos_;
    }
  }
  char peek() {
    skip_ws();
    if (pos_ >= s_.size()) fail("unexpected end of input");
    return s_[pos_];
  }
  void expect(char c) {
    if (peek() != c) fail("unexpected character");
    ++pos_;
  }
  bool literal(std::string_view word) {
    if (s_.substr(pos_, word.size()) != word) return false;
    pos_ += word.size();
    return true;
  }

  Value value(int depth) {
    if (depth > 64) fail("nesting too deep");
    char c = peek();
    if (c == '{') return object(depth);
    if (c == '[') return array(depth);
    if (c == '"') return Value(string());
    if (literal("true")) return Value(true);
    if (literal("false")) return Value(false);
    if (literal("null")) return Value();
    return number();
  }

  Value object(int depth) {
    Value v = Value::object();
    expect('{');
    if (peek() == '}') {
      ++pos_;
      return v;
    }
    for (;;) {
      if (peek() != '"') fail("expected a key");
      std::string key = string();
      expect(':');
      v.set(std::move(key), value(depth + 1));
      if (peek() == ',') {
        ++pos_;
        continue;
      }
      expect('}');
      return v;
    }
  }

  Value array(int depth) {
    Value v = Value::array();
    expect('[');
    if (peek() == ']') {
      ++pos_;
      return v;
    }
    for (;;) {
      v.push(value(depth + 1));
      if (peek() == ',') {
        ++pos_;
        continue;
      }
      expect(']');
      return v;
    }
  }

  Value number() {
    const char* begin = s_.data() + pos_;
    const char* end = s_.data() + s_.size();
    double n = 0;
    auto res = std::from_chars(begin, end, n);
    if (res.ec != std::errc() || res.ptr == begin) fail("bad number");
    pos_ += static_cast<size_t>(res.ptr - begin);
    return Value(n);
  }

  unsigned hex4() {
    if (pos_ + 4 > s_.size()) fail("short \\u escape");
    unsigned cp = 0;
    for (int i = 0; i < 4; ++i) {
      char c = s_[pos_++];
      cp <<= 4;
      if (c >= '0' && c <= '9')
        cp |= static_cast<unsigned>(c - '0');
      else if (c >= 'a' && c <= 'f')
        cp |= static_cast<unsigned>(c - 'a' + 10);
      else if (c >= 'A' && c <= 'F')
        cp |= static_cast<unsigned>(c - 'A' + 10);
      else
        fail("bad \\u escape");
    }
    return cp;
  }

  static void append_utf8(std::string& out, unsigned cp) {
    if (cp < 0x80) {
      out += static_cast<char>(cp);
    } else if (cp < 0x800) {
      out += static_cast<char>(0xC0 | (cp >> 6));
      out += static_cast<char>(0x80 | (cp & 0x3F));
    } else if (cp < 0x10000) {
      out += static_cast<char>(0xE0 | (cp >> 12));
      out += static_cast<char>(0x80 | ((cp >> 6) & 0x3F));
      out += static_cast<char>(0x80 | (cp & 0x3F));
    } else {
      out += static_cast<char>(0xF0 | (cp >> 18));
      out += static_cast<char>(0x80 | ((cp >> 12) & 0x3F));
      out += static_cast<char>(0x80 | ((cp >> 6) & 0x3F));
      out += static_cast<char>(0x80 | (cp & 0x3F));
    }
  }

  std::string string() {
    expect('"');
    std::string out;
    for (;;) {
      if (pos_ >= s_.size()) fail("unterminated string");
      char c = s_[pos_++];
      if (c == '"') return out;
      if (c != '\\') {
        out += c;
        continue;
      }
      if (pos_ >= s_.size()) fail("unterminated escape");
      char e = s_[pos_++];
      switch (e) {
        case '"': out += '"'; break;
        case '\\': out += '\\'; break;
        case '/': out += '/'; break;
        case 'b': out += '\b'; break;
        case 'f': out += '\f'; break;
        case 'n': out += '\n'; break;
        case 'r': out += '\r'; break;
        case 't': out += '\t'; break;
        case 'u': {
          unsigned cp = hex4();
          if (cp >= 0xD800 && cp < 0xDC00 && literal("\\u")) {
            unsigned low = hex4();
            cp = 0x10000 + ((cp - 0xD800) << 10) + (low - 0xDC00);
          }
          append_utf8(out, cp);
          break;
        }
        default: fail("bad escape");
      }
    }
  }

  std::string_view s_;
  size_t pos_ = 0;
};

}  // namespace

std::string dump(const Value& v, int indent) {
  std::string out;
  write(out, v, indent, 0);
  return out;
}

Value parse(std::string_view text) { return Parser(text).document(); }

}  // namespace remora::bench::json

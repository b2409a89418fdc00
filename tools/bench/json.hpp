// Minimal JSON value, writer and reader for remora-bench.
//
// Contract: this is only the exchange format between the bench parent and its suite children
// (same binary) and the --json output. It supports the whole JSON grammar (objects keep
// insertion order, numbers are doubles) but nothing beyond it. It is hand-written on purpose:
// the suite child is the measured application, so it links nothing but the CUDA runtime and
// the C++ standard library (no JSON package is among the project's dependencies).
#pragma once

#include <string>
#include <string_view>
#include <vector>

namespace remora::bench::json {

struct Member;

class Value {
 public:
  enum class Kind { Null, Bool, Number, String, Array, Object };

  Value() = default;
  Value(bool b);         // NOLINT(google-explicit-constructor): JSON literal syntax
  Value(double n);       // NOLINT
  Value(int n);          // NOLINT
  Value(std::string s);  // NOLINT
  Value(const char* s);  // NOLINT
  static Value array();
  static Value object();

  Kind kind() const { return kind_; }
  bool is_null() const { return kind_ == Kind::Null; }

  // Accessors return the fallback when the value has another kind (tolerant reading).
  bool as_bool(bool fallback = false) const;
  double as_number(double fallback = 0) const;
  const std::string& as_string() const;  // empty string unless a string
  const std::vector<Value>& items() const;
  const std::vector<Member>& members() const;

  // Array: appends. Object: sets (replaces an existing key). Both return *this.
  Value& push(Value v);
  Value& set(std::string key, Value v);
  // Object lookup; nullptr when absent or when this is not an object.
  const Value* find(std::string_view key) const;

 private:
  Kind kind_ = Kind::Null;
  bool bool_ = false;
  double number_ = 0;
  std::string string_;
  std::vector<Value> items_;
  std::vector<Member> members_;
};

struct Member {
  std::string key;
  Value value;
};

// Serialises with the given indentation (0: one line). Non-finite numbers become null.
std::string dump(const Value& v, int indent = 2);

// Parses a complete JSON text; throws std::runtime_error with the byte offset on bad input.
Value parse(std::string_view text);

}  // namespace remora::bench::json

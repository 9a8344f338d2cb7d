#include "json_locate.hpp"

#include <map>
#include <optional>

#include "text.hpp"
#include <fmt/format.h>

#include "pipetab/error.hpp"

namespace pipetab::io::detail {

const char* json_type_name(const nlohmann::json& value) {
  using json = nlohmann::json;
  switch (value.type()) {
    case json::value_t::object:
      return "an object";
    case json::value_t::array:
      return "an array";
    case json::value_t::string:
      return "a string";
    case json::value_t::boolean:
      return "a boolean";
    case json::value_t::null:
      return "null";
    default:
      return "a number";
  }
}

std::string to_string(const JsonPath& path) {
  if (path.empty()) return "(top level)";
  std::string out;
  for (const auto& step : path) {
    if (step.key.empty()) {
      out += fmt::format("[{}]", step.index);
    } else {
      out += (out.empty() ? "" : ".") + step.key;
    }
  }
  return out;
}

namespace {

// A scanner over text that nlohmann already accepted as JSON.
class Scanner {
 public:
  explicit Scanner(std::string_view text) : text_(text) {}

  std::size_t find(const JsonPath& path, bool at_key) {
    skip_space();
    for (std::size_t depth = 0; depth < path.size(); ++depth) {
      const auto& step = path[depth];
      const bool last = depth + 1 == path.size();
      if (!(step.key.empty() ? enter_element(step.index) : enter_member(step, last && at_key)))
        break;
      if (last && at_key) break;
    }
    return pos_;
  }

 private:
  void skip_space() {
    while (pos_ < text_.size() && (text_[pos_] == ' ' || text_[pos_] == '\t' ||
                                   text_[pos_] == '\n' || text_[pos_] == '\r')) {
      ++pos_;
    }
  }
  // Reads a string at pos_ (at its opening quote); returns its raw contents.
  std::string_view read_string() {
    const std::size_t start = ++pos_;
    while (pos_ < text_.size() && text_[pos_] != '"')
      pos_ += text_[pos_] == '\\' ? 2U : 1U;
    const auto raw = text_.substr(start, pos_ - start);
    ++pos_;
    return raw;
  }
  void skip_value() {
    skip_space();
    if (pos_ >= text_.size()) return;
    const char c = text_[pos_];
    if (c == '"') {
      read_string();
    } else if (c == '{' || c == '[') {
      int depth = 0;
      while (pos_ < text_.size()) {
        const char d = text_[pos_];
        if (d == '"') {
          read_string();
          continue;
        }
        if (d == '{' || d == '[') ++depth;
        if (d == '}' || d == ']') {
          if (--depth == 0) {
            ++pos_;
            return;
          }
        }
        ++pos_;
      }
    } else {
      while (pos_ < text_.size() && text_[pos_] != ',' && text_[pos_] != '}' &&
             text_[pos_] != ']' && text_[pos_] != ' ' && text_[pos_] != '\n' &&
             text_[pos_] != '\r' && text_[pos_] != '\t') {
        ++pos_;
      }
    }
  }
  bool enter_member(const JsonStep& step, bool stop_at_key) {
    if (pos_ >= text_.size() || text_[pos_] != '{') return false;
    const std::size_t object = pos_;
    ++pos_;
    int seen = 0;
    while (true) {
      skip_space();
      if (pos_ >= text_.size() || text_[pos_] != '"') break;
      const std::size_t key_at = pos_;
      const auto key = read_string();
      skip_space();
      ++pos_;  // ':'
      skip_space();
      if (key == step.key && ++seen == step.occurrence) {
        if (stop_at_key) pos_ = key_at;
        return true;
      }
      skip_value();
      skip_space();
      if (pos_ < text_.size() && text_[pos_] == ',') ++pos_;
    }
    pos_ = object;
    return false;
  }
  bool enter_element(std::int64_t index) {
    if (pos_ >= text_.size() || text_[pos_] != '[') return false;
    const std::size_t array = pos_;
    ++pos_;
    for (std::int64_t i = 0;; ++i) {
      skip_space();
      if (pos_ >= text_.size() || text_[pos_] == ']') break;
      if (i == index) return true;
      skip_value();
      skip_space();
      if (pos_ < text_.size() && text_[pos_] == ',') ++pos_;
    }
    pos_ = array;
    return false;
  }

  std::string_view text_;
  std::size_t pos_ = 0;
};

}  // namespace

std::size_t locate(std::string_view text, const JsonPath& path, bool at_key) {
  return Scanner(text).find(path, at_key);
}

std::size_t too_deep(std::string_view text, int max_depth) {
  int depth = 0;
  bool in_string = false;
  for (std::size_t i = 0; i < text.size(); ++i) {
    const char c = text[i];
    if (in_string) {
      if (c == '\\') {
        ++i;
      } else if (c == '"') {
        in_string = false;
      }
    } else if (c == '"') {
      in_string = true;
    } else if (c == '[' || c == '{') {
      if (++depth > max_depth) return i;
    } else if ((c == ']' || c == '}') && depth > 0) {
      --depth;
    }
  }
  return std::string_view::npos;
}

nlohmann::json parse_json(std::string_view text, const std::string& file,
                          std::string_view depth_hint) {
  using nlohmann::json;
  // Keys are tracked while parsing, in every object: the DOM keeps only the last of
  // duplicates. Each frame is an open object (its keys) or array (its element index).
  struct Frame {
    bool object = false;
    std::map<std::string, int> keys;
    std::string key;
    std::int64_t index = -1;
  };
  std::vector<Frame> frames;
  std::optional<JsonPath> duplicate;
  const auto element = [&] {
    if (!frames.empty() && !frames.back().object) ++frames.back().index;
  };
  const json::parser_callback_t on_event = [&](int, json::parse_event_t event, json& parsed) {
    switch (event) {
      case json::parse_event_t::object_start:
      case json::parse_event_t::array_start:
        element();
        frames.push_back(Frame{event == json::parse_event_t::object_start, {}, {}, -1});
        break;
      case json::parse_event_t::object_end:
      case json::parse_event_t::array_end:
        frames.pop_back();
        break;
      case json::parse_event_t::value:
        element();
        break;
      case json::parse_event_t::key: {
        auto& frame = frames.back();
        frame.key = parsed.get<std::string>();
        const int seen = ++frame.keys[frame.key];
        if (seen > 1 && !duplicate) {
          JsonPath path;
          for (std::size_t i = 0; i + 1 < frames.size(); ++i) {
            path.push_back(frames[i].object ? JsonStep{frames[i].key}
                                            : JsonStep{{}, frames[i].index});
          }
          path.push_back(JsonStep{frame.key, -1, seen});
          duplicate = std::move(path);
        }
        break;
      }
    }
    return true;
  };
  if (const auto deep = too_deep(text); deep != std::string_view::npos) {
    const auto [line, column] = line_column(text, deep);
    throw ParseError(
        file, line, column,
        fmt::format("JSON nested deeper than {} levels ({})", max_json_depth, depth_hint));
  }
  json doc;
  try {
    doc = json::parse(text.begin(), text.end(), on_event);
  } catch (const json::parse_error& e) {
    // nlohmann's message reads "[json.exception.parse_error.101] parse error at line L,
    // column C: what"; keep "what", compute the position from the byte index.
    std::string what = e.what();
    const auto colon = what.find(": ", what.find("column"));
    if (colon != std::string::npos) what = what.substr(colon + 2);
    const auto [line, column] = line_column(text, e.byte > 0 ? e.byte - 1 : 0);
    throw ParseError(file, line, column, "invalid JSON: " + what);
  } catch (const json::exception& e) {
    // Number overflow ("1e400") is reported without a position: point at the number.
    std::string what = e.what();
    what = what.substr(what.find(']') + 2);
    const auto quote = what.find('\'');
    const auto token = quote == std::string::npos
                           ? std::string()
                           : what.substr(quote + 1, what.rfind('\'') - quote - 1);
    const auto at = token.empty() ? std::string_view::npos : text.find(token);
    const auto [line, column] = line_column(text, at == std::string_view::npos ? 0 : at);
    throw ParseError(file, line, column, "invalid JSON: " + what);
  }
  if (duplicate) {
    const auto [line, column] = line_column(text, locate(text, *duplicate, true));
    throw ParseError(
        file, line, column,
        fmt::format("{}: duplicate key '{}'", to_string(*duplicate), duplicate->back().key));
  }
  return doc;
}

}  // namespace pipetab::io::detail

// Log lines, text and JSON: each stays one line whatever its message holds (a hostile name, a
// newline, an escape sequence, bytes that are not UTF-8), and a JSON line parses back to what
// was logged.
#include "util/log.h"

#include <gtest/gtest.h>

#include <string>

#include "nlohmann/json.hpp"

namespace metaload {
namespace {

const absl::Time kWhen = absl::FromUnixMillis(1'796'557'678'890);  // 2026-12-06 11:47:58.890 UTC

std::string Text(absl::string_view message, LogLevel level = LogLevel::kInfo) {
  return FormatLogLine(LogFormat::kText, "metad", level, kWhen, message);
}

std::string Json(absl::string_view message, absl::Span<const LogField> fields = {},
                 LogLevel level = LogLevel::kInfo) {
  return FormatLogLine(LogFormat::kJson, "metad", level, kWhen, message, fields);
}

TEST(LogText, IsProgramLevelTimeAndMessage) {
  EXPECT_EQ(Text("listening on 127.0.0.1:7070"), "metad I 11:47:58.890 listening on 127.0.0.1:7070\n");
  EXPECT_EQ(Text("x", LogLevel::kWarning), "metad W 11:47:58.890 x\n");
  EXPECT_EQ(Text("x", LogLevel::kError), "metad E 11:47:58.890 x\n");
}

TEST(LogText, EscapesControlBytesSoALineCannotForgeAnotherOrRewriteTheTerminal) {
  EXPECT_EQ(Text("a\nmetad I 12:00:00.000 forged"), "metad I 11:47:58.890 a\\nmetad I 12:00:00.000 forged\n");
  EXPECT_EQ(Text(std::string("\r\t\x1b[2J\x7f\0z", 9)), "metad I 11:47:58.890 \\r\\t\\x1b[2J\\x7f\\x00z\n");
  // Quotes, backslashes and bytes past ASCII are kept as they are: the text format is for eyes.
  EXPECT_EQ(Text("\"q\" \\ caf\xc3\xa9 \xff"), "metad I 11:47:58.890 \"q\" \\ caf\xc3\xa9 \xff\n");
}

TEST(LogJson, IsOneObjectWithTimestampLevelProgramMessageThenTheFieldsInOrder) {
  const std::string line = Json("load ended: model big", {{"event", "load_end"},
                                                          {"model", "big"},
                                                          {"ranks", 8},
                                                          {"bytes", uint64_t{18'446'744'073'709'551'615u}},
                                                          {"seconds", 3.25},
                                                          {"verified", true},
                                                          {"offset", int64_t{-1}}});
  EXPECT_EQ(line,
            "{\"ts\":\"2026-12-06T11:47:58.890Z\",\"level\":\"info\",\"program\":\"metad\","
            "\"msg\":\"load ended: model big\",\"event\":\"load_end\",\"model\":\"big\",\"ranks\":8,"
            "\"bytes\":18446744073709551615,\"seconds\":3.25,\"verified\":true,\"offset\":-1}\n");
  EXPECT_EQ(nlohmann::json::parse(Json("x", {}, LogLevel::kWarning))["level"], "warning");
  EXPECT_EQ(nlohmann::json::parse(Json("x", {}, LogLevel::kError))["level"], "error");
}

TEST(LogJson, EscapesQuotesBackslashesAndControlCharacters) {
  const std::string worst(
      "q\"b\\n\nr\rt\tnul\0esc\x1b"
      "del\x7f",
      22);
  const std::string line = Json(worst, {{"path", worst}});
  EXPECT_EQ(line.find('\n'), line.size() - 1) << "one line: " << line;
  EXPECT_NE(line.find(R"("msg":"q\"b\\n\nr\rt\tnul\u0000esc\u001bdel)"), std::string::npos) << line;
  const nlohmann::json parsed = nlohmann::json::parse(line);
  EXPECT_EQ(parsed["msg"].get<std::string>(), worst);
  EXPECT_EQ(parsed["path"].get<std::string>(), worst);
}

TEST(LogJson, ReplacesBytesThatAreNotUtf8AndKeepsThoseThatAre) {
  // A lone continuation byte, a truncated sequence, an overlong '/', a UTF-16 surrogate, 0xff;
  // then valid two-, three- and four-byte characters.
  const std::string hostile =
      "a\x80"
      "b\xe2\x82"
      "c\xc0\xaf"
      "d\xed\xa0\x80"
      "e\xff"
      "f";
  const std::string valid = "caf\xc3\xa9 \xe2\x82\xac \xf0\x9f\x98\x80";
  const nlohmann::json parsed = nlohmann::json::parse(Json(hostile + " " + valid, {{"model", hostile}}));
  std::string msg = parsed["msg"].get<std::string>();
  EXPECT_NE(msg.find("a\xef\xbf\xbd"
                     "b"),
            std::string::npos)
      << "each bad sequence became U+FFFD: " << msg;
  for (size_t at; (at = msg.find("\xef\xbf\xbd")) != std::string::npos;) msg.erase(at, 3);
  EXPECT_EQ(msg, "abcdef " + valid) << "nothing else was dropped, and valid UTF-8 is kept as it is";
  std::string model = parsed["model"].get<std::string>();
  for (size_t at; (at = model.find("\xef\xbf\xbd")) != std::string::npos;) model.erase(at, 3);
  EXPECT_EQ(model, "abcdef");
}

}  // namespace
}  // namespace metaload

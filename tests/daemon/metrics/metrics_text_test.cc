// The Prometheus text format metad writes (daemon/metrics/metrics_text.h, histogram.h,
// rpc_metrics.h): exact lines, the escapes, what it refuses to write.
#include "daemon/metrics/metrics_text.h"

#include <gtest/gtest.h>

#include <cmath>
#include <limits>

#include "daemon/metrics/histogram.h"
#include "daemon/metrics/rpc_metrics.h"

namespace metaload {
namespace {

TEST(MetricsText, FamilyAndSamplesAreTheFormatsLines) {
  MetricsText text;
  text.Family("metaload_streams_refused_total", MetricType::kCounter, "Streams refused");
  text.Sample("metaload_streams_refused_total", {{"reason", "max_streams"}}, uint64_t{7});
  text.Sample("metaload_streams_refused_total", {}, 0.25);
  EXPECT_EQ(text.Take(),
            "# HELP metaload_streams_refused_total Streams refused\n"
            "# TYPE metaload_streams_refused_total counter\n"
            "metaload_streams_refused_total{reason=\"max_streams\"} 7\n"
            "metaload_streams_refused_total 0.25\n");
}

TEST(MetricsText, LabelValuesAndHelpAreEscaped) {
  MetricsText text;
  text.Family("m", MetricType::kGauge, "a \\ back\nslash \"quoted\"");
  text.Sample("m", {{"node", "a\"b\\c\nd"}, {"x", ""}}, uint64_t{1});
  EXPECT_EQ(text.Take(),
            "# HELP m a \\\\ back\\nslash \"quoted\"\n"
            "# TYPE m gauge\n"
            "m{node=\"a\\\"b\\\\c\\nd\",x=\"\"} 1\n");
}

TEST(MetricsText, BytesThatAreNotUtf8BecomeReplacementCharacters) {
  std::string out;
  AppendEscapedLabelValue("ok \xC3\xA9 \xFF \xC0\xAF \xED\xA0\x80 \xF0\x9F\x98", &out);
  // é stays; a stray byte, an overlong '/', a surrogate and a truncated sequence do not.
  EXPECT_EQ(out,
            "ok \xC3\xA9 \xEF\xBF\xBD \xEF\xBF\xBD\xEF\xBF\xBD \xEF\xBF\xBD\xEF\xBF\xBD\xEF\xBF\xBD "
            "\xEF\xBF\xBD\xEF\xBF\xBD\xEF\xBF\xBD");
}

TEST(MetricsText, BadNamesAreNotWrittenButCounted) {
  MetricsText text;
  text.Family("9lives", MetricType::kGauge, "x");
  text.Sample("has space", {}, uint64_t{1});
  text.Sample("ok", {{"__reserved", "v"}}, uint64_t{1});
  text.Sample("ok", {{"bad-label", "v"}}, uint64_t{1});
  text.Sample("ok:colon", {{"_fine", "v"}}, uint64_t{2});
  EXPECT_EQ(text.dropped(), 4u);
  EXPECT_EQ(text.Take(), "ok:colon{_fine=\"v\"} 2\n");
}

TEST(MetricsText, ValuesAreWrittenAsPrometheusReadsThem) {
  EXPECT_EQ(FormatMetricValue(0), "0");
  EXPECT_EQ(FormatMetricValue(123456789012.0), "123456789012");
  EXPECT_EQ(FormatMetricValue(0.0005), "0.0005");
  EXPECT_EQ(FormatMetricValue(std::numeric_limits<double>::infinity()), "+Inf");
  EXPECT_EQ(FormatMetricValue(-std::numeric_limits<double>::infinity()), "-Inf");
  EXPECT_EQ(FormatMetricValue(std::nan("")), "NaN");
  EXPECT_EQ(FormatMetricValue(1e300), "1e+300");
}

TEST(Histogram, BucketsAreCumulativeAndCountIsTheInfBucket) {
  Histogram histogram({0.01, 0.1, 1});
  for (double v : {0.005, 0.01, 0.05, 2.0, 3.0}) histogram.Observe(v);
  MetricsText text;
  histogram.Write("d_seconds", {{"method", "GetPlan"}}, text);
  EXPECT_EQ(text.Take(),
            "d_seconds_bucket{method=\"GetPlan\",le=\"0.01\"} 2\n"
            "d_seconds_bucket{method=\"GetPlan\",le=\"0.1\"} 3\n"
            "d_seconds_bucket{method=\"GetPlan\",le=\"1\"} 3\n"
            "d_seconds_bucket{method=\"GetPlan\",le=\"+Inf\"} 5\n"
            "d_seconds_sum{method=\"GetPlan\"} 5.065\n"
            "d_seconds_count{method=\"GetPlan\"} 5\n");
  EXPECT_EQ(histogram.count(), 5u);
}

TEST(RpcMetrics, MethodsAreAClosedSet) {
  EXPECT_EQ(RpcMetrics::MethodOf("/metaload.v1.Metad/GetPlan"),
            RpcMetrics::MethodOf("/metaload.v1.Metad/GetPlan"));
  const RpcMethod unknown = RpcMetrics::MethodOf("/x.Y/Z");
  EXPECT_EQ(RpcMetrics::MethodOf("/metaload.v1.Metad/NoSuchMethod"), unknown);
  EXPECT_EQ(RpcMetrics::MethodOf("/metaload.v1.Metad/"), unknown);
  EXPECT_EQ(RpcMetrics::MethodOf(""), unknown);
  EXPECT_NE(RpcMetrics::MethodOf("/grpc.health.v1.Health/Check"), unknown);
  RpcMetrics rpcs;
  rpcs.Record(RpcMetrics::MethodOf("/metaload.v1.Metad/GetStatus"), 0, absl::Milliseconds(2));
  rpcs.Record(RpcMetrics::MethodOf("/metaload.v1.Metad/GetStatus"), 16, absl::Milliseconds(1));
  rpcs.Record(unknown, 99, absl::Seconds(1));  // a code out of range counts as UNKNOWN
  MetricsText text;
  rpcs.Write(text);
  const std::string out = text.Take();
  EXPECT_NE(out.find("metaload_rpc_duration_seconds_count{method=\"GetStatus\"} 2\n"), std::string::npos)
      << out;
  EXPECT_NE(out.find("metaload_rpc_handled_total{method=\"GetStatus\",code=\"OK\"} 1\n"), std::string::npos);
  EXPECT_NE(out.find("metaload_rpc_handled_total{method=\"GetStatus\",code=\"UNAUTHENTICATED\"} 1\n"),
            std::string::npos);
  EXPECT_NE(out.find("metaload_rpc_handled_total{method=\"unknown\",code=\"UNKNOWN\"} 1\n"),
            std::string::npos);
  EXPECT_EQ(out.find("code=\"NOT_FOUND\""), std::string::npos) << "pairs not seen are not written";
}

}  // namespace
}  // namespace metaload

// A real metad process, spoken to over gRPC: every bad request gets the fitting status, good
// ranges arrive byte-exact, and a cancelled stream does not hurt the daemon.
#include <fcntl.h>
#include <grpcpp/grpcpp.h>
#include <gtest/gtest.h>
#include <signal.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

#include <cstdio>
#include <memory>
#include <string>

#include "proto/metaload.grpc.pb.h"
#include "proto/upload.h"
#include "tests/daemon/metad_process.h"
#include "tests/test_support.h"
#include "util/hash/crc32c.h"

namespace metaload {
namespace {

using ::metaload::testing::MetadProcess;
using ::metaload::testing::TempDir;
using ::metaload::testing::WriteFileOrDie;

struct Daemon {
  TempDir dir;
  std::unique_ptr<MetadProcess> process;
  std::unique_ptr<v1::Metad::Stub> stub;
  std::string data;

  Daemon() {
    ::mkdir(dir.File("root").c_str(), 0755);
    // A safetensors file: its one U8 tensor "t" is 3 MiB + 1 byte of a pattern after the header
    // (a published record is served only as the file's own header says, issue 23).
    data.resize(kHeaderBytes + 3 * 1024 * 1024 + 1);
    for (size_t i = 0; i < data.size(); ++i) data[i] = static_cast<char>((i * 2654435761u) >> 13);
    const uint64_t tensor_bytes = data.size() - kHeaderBytes;
    std::string header = absl::StrCat(R"({"t":{"dtype":"U8","shape":[)", tensor_bytes,
                                      R"(],"data_offsets":[0,)", tensor_bytes, "]}}");
    EXPECT_LE(header.size(), kHeaderBytes - 8);
    header.resize(kHeaderBytes - 8, ' ');
    for (int i = 0; i < 8; ++i) data[i] = static_cast<char>(((kHeaderBytes - 8) >> (8 * i)) & 0xff);
    data.replace(8, header.size(), header);
    WriteFileOrDie(dir.File("root/data.bin"), data);
    WriteFileOrDie(dir.File("outside.bin"), "secret");
    WriteFileOrDie(
        dir.File("node.yaml"),
        "node: a\nlisten: 127.0.0.1:0\ngpus: 2\nchunk_size: 1MiB\nroots: [" + dir.File("root") + "]\n");
    process = std::make_unique<MetadProcess>(dir.File("node.yaml"));
    stub = v1::Metad::NewStub(grpc::CreateChannel(process->address(), grpc::InsecureChannelCredentials()));
    // Only tensors of registered models are served: "d" holds data.bin's tensor; "shrunk" was
    // registered when the file was 1 MiB longer.
    EXPECT_TRUE(Publish("d", dir.File("root"), "data.bin", kHeaderBytes, data.size()).ok());
    EXPECT_TRUE(Publish("shrunk", dir.File("root"), "data.bin", kHeaderBytes, data.size() + (1 << 20)).ok());
  }

  static constexpr uint64_t kHeaderBytes = 80;  // 8 + a 72-byte JSON header

  // Registers, as a node agent publishes it, a model of one U8 tensor at [begin, end) of `file`.
  grpc::Status Publish(const std::string& name, const std::string& folder, const std::string& file,
                       uint64_t begin, uint64_t end) {
    v1::PublishModelRequest request;
    v1::ModelRecord* r = request.mutable_model();
    r->set_name(name);
    r->set_checkpoint_dir(folder);
    r->set_skeleton_json(
        absl::StrCat(R"({"format": "metaload.skeleton/1", "tensors": [{"name": "t", "shape": [)", end - begin,
                     R"(], "dtype": "U8"}]})"));
    r->set_registered_on("a");
    v1::TensorLocation* t = r->add_tensors();
    t->set_name("t");
    t->set_dtype("U8");
    t->add_shape(static_cast<int64_t>(end - begin));
    t->set_file(file);
    t->set_begin_offset(begin);
    t->set_end_offset(end);
    grpc::ClientContext ctx;
    v1::PublishModelResponse response;
    return PublishModel(*stub, &ctx, request, &response);
  }

  // Reads a whole ReadRange stream; returns the status and the bytes.
  // With run_bytes > 0 the read is strided (runs of run_bytes every stride_bytes).
  grpc::Status Read(const std::string& path, uint64_t offset, uint64_t length, std::string* bytes,
                    int* chunks = nullptr, uint64_t run_bytes = 0, uint64_t stride_bytes = 0,
                    uint64_t expected_size_bytes = 0, int64_t expected_mtime_ns = 0,
                    const std::string& model = "d") {
    grpc::ClientContext ctx;
    v1::ReadRangeRequest request;
    request.set_model(model);
    request.set_path(path);
    request.set_offset(offset);
    request.set_length(length);
    request.set_run_bytes(run_bytes);
    request.set_stride_bytes(stride_bytes);
    request.set_expected_size_bytes(expected_size_bytes);
    request.set_expected_mtime_ns(expected_mtime_ns);
    auto reader = stub->ReadRange(&ctx, request);
    v1::ReadRangeChunk chunk;
    int count = 0;
    while (reader->Read(&chunk)) {
      EXPECT_EQ(chunk.position(), bytes->size());
      if (run_bytes == 0) {
        EXPECT_EQ(chunk.offset(), offset + bytes->size());
      }
      // Every chunk carries the CRC-32C of exactly its data.
      EXPECT_TRUE(chunk.has_crc32c());
      EXPECT_EQ(chunk.crc32c(),
                Crc32c(absl::MakeConstSpan(reinterpret_cast<const uint8_t*>(chunk.data().data()),
                                           chunk.data().size())));
      *bytes += chunk.data();
      ++count;
    }
    if (chunks != nullptr) *chunks = count;
    return reader->Finish();
  }
};

TEST(Service, StartsAndAnswersStatus) {
  Daemon d;
  ASSERT_FALSE(d.process->address().empty()) << "metad did not print its address";
  grpc::ClientContext ctx;
  v1::GetStatusResponse status;
  ASSERT_TRUE(d.stub->GetStatus(&ctx, v1::GetStatusRequest(), &status).ok());
  EXPECT_EQ(status.self().name(), "a");
  EXPECT_TRUE(status.is_coordinator());
  ASSERT_EQ(status.members_size(), 1);
  EXPECT_EQ(status.members(0).address(), d.process->address());
}

TEST(Service, ReadRangeStreamsExactBytesInOneMiBChunks) {
  Daemon d;
  std::string bytes;
  int chunks = 0;
  grpc::Status s = d.Read(d.dir.File("root/data.bin"), Daemon::kHeaderBytes,
                          d.data.size() - Daemon::kHeaderBytes, &bytes, &chunks);
  ASSERT_TRUE(s.ok()) << s.error_message();
  EXPECT_EQ(bytes, d.data.substr(Daemon::kHeaderBytes));
  EXPECT_EQ(chunks, 4);  // 3 MiB + 1 byte in 1 MiB chunks
}

// The registered size and mtime a rank sends are compared with the file the daemon opened.
TEST(Service, ReadRangeOfAFileChangedSinceRegistrationIsFailedPrecondition) {
  Daemon d;
  struct stat st;
  ASSERT_EQ(::stat(d.dir.File("root/data.bin").c_str(), &st), 0);
  const int64_t mtime_ns = static_cast<int64_t>(st.st_mtim.tv_sec) * 1000000000 + st.st_mtim.tv_nsec;
  std::string bytes;
  grpc::Status s = d.Read(d.dir.File("root/data.bin"), Daemon::kHeaderBytes, 10, &bytes, nullptr, 0, 0,
                          d.data.size(), mtime_ns);
  ASSERT_TRUE(s.ok()) << s.error_message();
  EXPECT_EQ(bytes, d.data.substr(Daemon::kHeaderBytes, 10));

  bytes.clear();
  s = d.Read(d.dir.File("root/data.bin"), Daemon::kHeaderBytes, 10, &bytes, nullptr, 0, 0, d.data.size(),
             mtime_ns - 1000000000);
  EXPECT_EQ(s.error_code(), grpc::StatusCode::FAILED_PRECONDITION);
  EXPECT_NE(s.error_message().find("data.bin changed since it was registered: mtime "), std::string::npos)
      << s.error_message();
  EXPECT_NE(s.error_message().find(absl::StrCat("(size ", d.data.size(), " bytes, as registered)")),
            std::string::npos)
      << s.error_message();
  EXPECT_TRUE(bytes.empty());

  s = d.Read(d.dir.File("root/data.bin"), Daemon::kHeaderBytes, 10, &bytes, nullptr, 0, 0, d.data.size() + 1,
             mtime_ns);
  EXPECT_EQ(s.error_code(), grpc::StatusCode::FAILED_PRECONDITION);
  EXPECT_NE(
      s.error_message().find(absl::StrCat("size ", d.data.size(), " bytes, registered ", d.data.size() + 1)),
      std::string::npos)
      << s.error_message();
}

// A model registered from a folder outside the daemon's roots (a coordinator takes a published
// record as it comes) still has none of its files served.
TEST(Service, ReadRangeOutsideRootsIsPermissionDenied) {
  Daemon d;
  ASSERT_TRUE(d.Publish("outside", d.dir.path(), "outside.bin", 0, 6).ok());
  std::string bytes;
  grpc::Status s = d.Read(d.dir.File("outside.bin"), 0, 6, &bytes, nullptr, 0, 0, 0, 0, "outside");
  EXPECT_EQ(s.error_code(), grpc::StatusCode::PERMISSION_DENIED);
  EXPECT_NE(s.error_message().find("is not under this daemon's roots"), std::string::npos)
      << s.error_message();
  EXPECT_TRUE(bytes.empty());
  s = d.Read(d.dir.File("root/../outside.bin"), 0, 6, &bytes, nullptr, 0, 0, 0, 0, "outside");
  EXPECT_EQ(s.error_code(), grpc::StatusCode::PERMISSION_DENIED);
  s = d.Read("/etc/passwd", 0, 6, &bytes);
  EXPECT_EQ(s.error_code(), grpc::StatusCode::PERMISSION_DENIED);
}

// Issue 13: under a root, only bytes inside a registered model's tensors are served.
TEST(Service, ReadRangeOutsideAModelsTensorsIsPermissionDenied) {
  Daemon d;
  WriteFileOrDie(d.dir.File("root/.env"), "TOKEN=secret\n");
  std::string bytes;
  grpc::Status s = d.Read(d.dir.File("root/.env"), 0, 6, &bytes);
  EXPECT_EQ(s.error_code(), grpc::StatusCode::PERMISSION_DENIED);
  EXPECT_EQ(s.error_message(), absl::StrCat("ReadRange: \"", d.dir.File("root/.env"),
                                            "\" is not a file of registered model \"d\""));
  s = d.Read(d.dir.File("root/data.bin"), 0, 16, &bytes);  // the header's first bytes
  EXPECT_EQ(s.error_code(), grpc::StatusCode::PERMISSION_DENIED);
  EXPECT_EQ(s.error_message(), absl::StrCat("ReadRange: bytes [0, 16) of \"", d.dir.File("root/data.bin"),
                                            "\" are not inside a tensor of registered model \"d\""));
  s = d.Read(d.dir.File("root/data.bin"), d.data.size() - 1, 2, &bytes);  // one past the tensor
  EXPECT_EQ(s.error_code(), grpc::StatusCode::PERMISSION_DENIED);
  s = d.Read(d.dir.File("root/data.bin"), Daemon::kHeaderBytes, 10, &bytes, nullptr, 0, 0, 0, 0, "nobody");
  EXPECT_EQ(s.error_code(), grpc::StatusCode::PERMISSION_DENIED);
  EXPECT_EQ(s.error_message(), absl::StrCat("ReadRange: \"", d.dir.File("root/data.bin"),
                                            "\" is not a file of a registered model: no "
                                            "model \"nobody\" is registered (registered: d, shrunk)"));
  // A request without a model is malformed.
  s = d.Read(d.dir.File("root/data.bin"), Daemon::kHeaderBytes, 10, &bytes, nullptr, 0, 0, 0, 0, "");
  EXPECT_EQ(s.error_code(), grpc::StatusCode::INVALID_ARGUMENT) << s.error_message();
  EXPECT_TRUE(bytes.empty());
  // Issue 23: a published record naming the .env is not believed: the file is no safetensors file.
  ASSERT_TRUE(d.Publish("evil", d.dir.File("root"), ".env", 0, 13).ok());
  s = d.Read(d.dir.File("root/.env"), 0, 13, &bytes, nullptr, 0, 0, 0, 0, "evil");
  EXPECT_EQ(s.error_code(), grpc::StatusCode::PERMISSION_DENIED);
  EXPECT_NE(s.error_message().find(absl::StrCat("ReadRange: \"", d.dir.File("root/.env"),
                                                "\" does not hold what the record of model \"evil\" says")),
            std::string::npos)
      << s.error_message();
  EXPECT_EQ(s.error_message().find("secret"), std::string::npos) << s.error_message();
  EXPECT_TRUE(bytes.empty());
  // Unregistered: its file is refused from then on, but for another model that holds it.
  ASSERT_TRUE(d.Publish("again", d.dir.File("root"), "data.bin", Daemon::kHeaderBytes, d.data.size()).ok());
  grpc::ClientContext ctx;
  v1::UnregisterModelRequest unregister;
  unregister.set_name("d");
  v1::UnregisterModelResponse unregistered;
  ASSERT_TRUE(d.stub->UnregisterModel(&ctx, unregister, &unregistered).ok());
  ASSERT_TRUE(
      d.Read(d.dir.File("root/data.bin"), Daemon::kHeaderBytes, 10, &bytes, nullptr, 0, 0, 0, 0, "again")
          .ok());
  EXPECT_EQ(d.Read(d.dir.File("root/data.bin"), Daemon::kHeaderBytes, 10, &bytes).error_code(),
            grpc::StatusCode::PERMISSION_DENIED);
}

// A path that resolves elsewhere than the registered file (a symlink put in its place) is not it.
TEST(Service, ReadRangeThroughASymlinkIsPermissionDenied) {
  Daemon d;
  ASSERT_EQ(::symlink(d.dir.File("root/data.bin").c_str(), d.dir.File("root/link.bin").c_str()), 0);
  ASSERT_TRUE(d.Publish("linked", d.dir.File("root"), "link.bin", Daemon::kHeaderBytes, d.data.size()).ok());
  std::string bytes;
  grpc::Status s =
      d.Read(d.dir.File("root/link.bin"), Daemon::kHeaderBytes, 10, &bytes, nullptr, 0, 0, 0, 0, "linked");
  EXPECT_EQ(s.error_code(), grpc::StatusCode::PERMISSION_DENIED);
  EXPECT_NE(s.error_message().find(absl::StrCat("resolves to \"", d.dir.File("root/data.bin"))),
            std::string::npos)
      << s.error_message();
}

TEST(Service, ReadRangeMissingFileIsNotFound) {
  Daemon d;
  ASSERT_TRUE(d.Publish("gone", d.dir.File("root"), "nope.bin", 0, 1).ok());
  std::string bytes;
  EXPECT_EQ(d.Read(d.dir.File("root/nope.bin"), 0, 1, &bytes, nullptr, 0, 0, 0, 0, "gone").error_code(),
            grpc::StatusCode::NOT_FOUND);
}

// A published record whose tensor passes the end of its file (the file shrank since, or the
// record lies): refused by the file's own header before anything of the file is told, its size
// included (issue 35: "passes the end of ... (N bytes)" gave away the size of a file a forged
// record named). An offset + length that overflows is OutOfRange before a file is opened.
TEST(Service, ReadRangePastTheEndOfAPublishedRecordsFileTellsNotItsSize) {
  Daemon d;
  std::string bytes;
  grpc::Status s =
      d.Read(d.dir.File("root/data.bin"), d.data.size() - 1, 2, &bytes, nullptr, 0, 0, 0, 0, "shrunk");
  EXPECT_EQ(s.error_code(), grpc::StatusCode::PERMISSION_DENIED);
  EXPECT_EQ(s.error_message(), absl::StrCat("ReadRange: \"", d.dir.File("root/data.bin"),
                                            "\" does not hold what the record of model \"shrunk\" says"));
  EXPECT_TRUE(bytes.empty());
  s = d.Read(d.dir.File("root/data.bin"), ~0ull, 2, &bytes);  // offset + length overflows
  EXPECT_EQ(s.error_code(), grpc::StatusCode::OUT_OF_RANGE);
}

// A row-parallel slice: 3000 runs of 700 bytes every 1024 bytes, gathered by the daemon
// into one stream of 1 MiB chunks (2.1 MB: 3 chunks), never one call per run.
TEST(Service, StridedReadRangeGathersRunsBackToBack) {
  Daemon d;
  std::string bytes, expected;
  for (uint64_t r = 0; r < 3000; ++r) expected += d.data.substr(100 + r * 1024, 700);
  int chunks = 0;
  grpc::Status s = d.Read(d.dir.File("root/data.bin"), 100, expected.size(), &bytes, &chunks, 700, 1024);
  ASSERT_TRUE(s.ok()) << s.error_message();
  EXPECT_EQ(bytes.size(), expected.size());
  EXPECT_TRUE(bytes == expected) << "gathered bytes differ from the runs";
  EXPECT_EQ(chunks, 3);
}

TEST(Service, StridedReadRangeErrors) {
  Daemon d;
  std::string bytes;
  // length not a multiple of run_bytes
  grpc::Status s = d.Read(d.dir.File("root/data.bin"), 0, 1000, &bytes, nullptr, 300, 1024);
  EXPECT_EQ(s.error_code(), grpc::StatusCode::INVALID_ARGUMENT);
  EXPECT_NE(s.error_message().find("must be a multiple of run_bytes 300"), std::string::npos)
      << s.error_message();
  // stride below the run
  s = d.Read(d.dir.File("root/data.bin"), 0, 1000, &bytes, nullptr, 500, 100);
  EXPECT_EQ(s.error_code(), grpc::StatusCode::INVALID_ARGUMENT);
  // the last run passes the end of the file (which shrank since the record was published): the
  // file's header refuses the record first, telling nothing of the file's size
  s = d.Read(d.dir.File("root/data.bin"), Daemon::kHeaderBytes, 4 * 4096, &bytes, nullptr, 4096,
             d.data.size() / 3, 0, 0, "shrunk");
  EXPECT_EQ(s.error_code(), grpc::StatusCode::PERMISSION_DENIED);
  EXPECT_EQ(s.error_message().find("passes the end of"), std::string::npos) << s.error_message();
  // (run_count - 1) * stride overflows
  s = d.Read(d.dir.File("root/data.bin"), 0, 4 * 4096, &bytes, nullptr, 4096, ~0ull / 2);
  EXPECT_EQ(s.error_code(), grpc::StatusCode::OUT_OF_RANGE);
  EXPECT_TRUE(bytes.empty());
}

// Runs of a few bytes far apart would cost one system call per few bytes (issue 9: run_bytes 1
// issued one pread per byte): no tensor slice looks like that, so the daemon refuses them.
TEST(Service, TinyRunsFarApartAreRefused) {
  Daemon d;
  std::string bytes;
  grpc::Status s = d.Read(d.dir.File("root/data.bin"), Daemon::kHeaderBytes, 8, &bytes, nullptr, 1, 100'000);
  EXPECT_EQ(s.error_code(), grpc::StatusCode::INVALID_ARGUMENT);
  EXPECT_NE(s.error_message().find("runs of 1 bytes every 100000 bytes"), std::string::npos)
      << s.error_message();
  // Tiny runs close together are served, gathered.
  s = d.Read(d.dir.File("root/data.bin"), Daemon::kHeaderBytes, 1 << 20, &bytes, nullptr, 1, 2);
  ASSERT_TRUE(s.ok()) << s.error_message();
  ASSERT_EQ(bytes.size(), 1u << 20);
  for (size_t i = 0; i < bytes.size(); i += 4099)
    ASSERT_EQ(bytes[i], d.data[Daemon::kHeaderBytes + 2 * i]) << i;
}

TEST(Service, CancelledStreamLeavesTheDaemonServing) {
  Daemon d;
  {
    grpc::ClientContext ctx;
    v1::ReadRangeRequest request;
    request.set_model("d");
    request.set_path(d.dir.File("root/data.bin"));
    request.set_offset(Daemon::kHeaderBytes);
    request.set_length(d.data.size() - Daemon::kHeaderBytes);
    auto reader = d.stub->ReadRange(&ctx, request);
    v1::ReadRangeChunk chunk;
    ASSERT_TRUE(reader->Read(&chunk));
    ctx.TryCancel();
    while (reader->Read(&chunk)) {
    }
    EXPECT_EQ(reader->Finish().error_code(), grpc::StatusCode::CANCELLED);
  }
  std::string bytes;
  EXPECT_TRUE(d.Read(d.dir.File("root/data.bin"), Daemon::kHeaderBytes, 10, &bytes).ok());
  EXPECT_EQ(bytes, d.data.substr(Daemon::kHeaderBytes, 10));
}

TEST(Service, GetPlanErrors) {
  Daemon d;
  v1::GetPlanResponse response;
  {
    grpc::ClientContext ctx;
    v1::GetPlanRequest request;
    request.set_model("nope");
    request.set_world_size(1);
    grpc::Status s = d.stub->GetPlan(&ctx, request, &response);
    EXPECT_EQ(s.error_code(), grpc::StatusCode::NOT_FOUND);
    EXPECT_NE(s.error_message().find("no model \"nope\" is registered"), std::string::npos);
  }
  {
    grpc::ClientContext ctx;
    v1::GetPlanRequest request;
    request.set_model("nope");
    request.set_world_size(-4);
    EXPECT_EQ(d.stub->GetPlan(&ctx, request, &response).error_code(), grpc::StatusCode::INVALID_ARGUMENT);
  }
}

TEST(Service, RegisterErrors) {
  Daemon d;
  struct Case {
    std::string name, dir;
    grpc::StatusCode code;
    std::string message;
  } cases[] = {
      {"bad name!", d.dir.File("root"), grpc::StatusCode::INVALID_ARGUMENT, "may hold only letters"},
      {"m", "relative/dir", grpc::StatusCode::INVALID_ARGUMENT, "must be an absolute path"},
      {"m", d.dir.File("root/missing"), grpc::StatusCode::NOT_FOUND, "cannot resolve"},
      {"m", d.dir.path(), grpc::StatusCode::PERMISSION_DENIED, "is not under this daemon's roots"},
      {"m", d.dir.File("root"), grpc::StatusCode::NOT_FOUND, "model.safetensors"},
  };
  for (const Case& c : cases) {
    grpc::ClientContext ctx;
    v1::RegisterModelRequest request;
    request.set_name(c.name);
    request.set_checkpoint_dir(c.dir);
    v1::RegisterModelResponse response;
    grpc::Status s = RegisterModel(*d.stub, &ctx, request, &response);
    EXPECT_EQ(s.error_code(), c.code) << c.name << " " << c.dir << ": " << s.error_message();
    EXPECT_NE(s.error_message().find(c.message), std::string::npos) << s.error_message();
  }
}

TEST(Service, JoinRefusesASecondNodeWithTheSameName) {
  Daemon d;
  grpc::ClientContext ctx;
  v1::JoinRequest request;
  request.mutable_node()->set_name("a");
  request.mutable_node()->set_address("127.0.0.1:1");
  v1::JoinResponse response;
  grpc::Status s = d.stub->Join(&ctx, request, &response);
  EXPECT_EQ(s.error_code(), grpc::StatusCode::INVALID_ARGUMENT);
  EXPECT_NE(s.error_message().find("node name \"a\" is already used by"), std::string::npos);
}

}  // namespace
}  // namespace metaload

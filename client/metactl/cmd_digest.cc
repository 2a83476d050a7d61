// metactl digest DIR: every tensor's tile digest from one read of the checkpoint, written beside
// it as DIR/metaload.digests.json (planner/format/digest_manifest.h), so that ranks loading the
// folder without a daemon (materialize(checkpoint=), from_pretrained, StorageReader) prove its
// bytes as a registered model's are proven (docs/integrity.md).
#include <iostream>
#include <string>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "absl/time/clock.h"
#include "client/metactl/commands.h"
#include "client/metactl/offline_common.h"
#include "planner/format/checkpoint.h"
#include "planner/format/checkpoint_digests.h"
#include "planner/format/digest_manifest.h"
#include "util/fs/location.h"
#include "util/status_macros.h"
#include "util/units.h"

namespace metaload {
namespace {

constexpr absl::Duration kProgressEvery = absl::Seconds(5);

absl::Status Digest(const CliArgs& args) {
  ML_RETURN_IF_ERROR(args.ExpectPositionals(1, 1, "one DIR (a checkpoint folder)"));
  const std::string dir = args.positionals().front();
  ML_RETURN_IF_ERROR(CheckNotAModelName("digest", dir));
  ML_ASSIGN_OR_RETURN(DigestKind kind, ParseDigestKind(args.GetOr("kind", "fast")));
  ML_ASSIGN_OR_RETURN(Checkpoint checkpoint, OpenCheckpoint(dir));
  const uint64_t total = checkpoint.total_size_bytes();
  DigestPassOptions options;
  // Every file as its header was read: one that changes meanwhile is refused, not half-hashed.
  for (size_t i = 0; i < checkpoint.files.size() && i < checkpoint.stamps.size(); ++i) {
    options.expected[checkpoint.files[i]] = checkpoint.stamps[i];
  }
  const absl::Time start = absl::Now();
  absl::Time last = start;
  uint64_t done = 0;
  options.on_bytes = [&](uint64_t bytes, const std::string& file) {
    done += bytes;
    if (absl::Now() - last < kProgressEvery) return;
    last = absl::Now();
    std::cerr << absl::StrFormat("metactl digest: %s of %s (%.0f%%), reading %s\n", FormatBytes(done),
                                 FormatBytes(total),
                                 100.0 * static_cast<double>(done) / static_cast<double>(total), file);
  };
  ML_ASSIGN_OR_RETURN(std::vector<TensorDigest> digests,
                      DigestCheckpoint(checkpoint, kind, Storage(), options));
  const std::string out = args.GetOr("out", JoinLocation(checkpoint.dir, kDigestManifestName));
  ML_RETURN_IF_ERROR(WriteOutput(out, DigestManifestJson(checkpoint, kind, digests)));
  const double seconds = absl::ToDoubleSeconds(absl::Now() - start);
  std::cerr << absl::StrFormat(
      "metactl digest: wrote %s: %s digests of %d tensors, %s in %.2f s (%.2f GB/s)\n",
      out == "-" ? "stdout" : out, DigestKindName(kind), checkpoint.tensors.size(), FormatBytes(total),
      seconds, seconds > 0 ? static_cast<double>(total) / seconds / 1e9 : 0.0);
  return absl::OkStatus();
}

}  // namespace

int RunDigest(int argc, char** argv) {
  CliArgs args("metactl digest", "DIR [--kind fast|strong] [--out FILE]",
               "Reads every tensor of checkpoint DIR once and writes DIR/metaload.digests.json: each\n"
               "tensor's tile digest, the sum of a term per tile of its stored bytes, and each file's\n"
               "size and mtime. Ranks that load the folder without a daemon (metaload.materialize with\n"
               "checkpoint=, metaload.from_pretrained, metaload.StorageReader) then prove every byte they\n"
               "hold against it, whatever part of a tensor each holds; the manifest is used only while\n"
               "every file still has the size and mtime it names. A registered model's digests are\n"
               "computed by its daemon (metactl register) and need no manifest.");
  args.Flag("kind", "KIND",
            "fast (default): XXH3 tiles, ~10-17 GB/s a core, catches corruption; strong: SHA-256\n"
            "LtHash tiles, ~1 GB/s a core, which no one choosing the bytes can match (docs/integrity.md)");
  args.Flag("out", "FILE", "write the manifest here instead (\"-\": stdout)");
  args.Epilog(
      "examples:\n"
      "  metactl digest /models/llama-8b\n"
      "  metactl digest /models/llama-8b --kind strong\n\n"
      "exit codes: 0 written; 2 bad input (not a checkpoint, a bad kind); 1 a file changed while it was\n"
      "read, or could not be read or written.");
  return ParseAndRun("digest", args, argc, argv, &Digest);
}

}  // namespace metaload

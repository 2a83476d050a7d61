#include "planner/format/digest_manifest.h"

#include <map>

#include "absl/strings/ascii.h"
#include "absl/strings/escaping.h"
#include "absl/strings/str_cat.h"
#include "util/fs/location.h"
#include "util/json/json_util.h"
#include "util/status_macros.h"

namespace metaload {
namespace {

using json_util::Json;
using json_util::OrderedJson;

constexpr char kFormat[] = "metaload.digests/1";
// A strong digest is 4,096 hex characters: a manifest of a million tensors stays under this.
constexpr uint64_t kMaxManifestBytes = uint64_t{5} << 30;

// Hex digits only, in pairs.
bool FromHex(absl::string_view hex, std::string* out) {
  if (hex.size() % 2 != 0) return false;
  for (char c : hex) {
    if (!absl::ascii_isxdigit(static_cast<unsigned char>(c))) return false;
  }
  *out = absl::HexStringToBytes(hex);
  return true;
}

std::string NotUsed(const std::string& path, const std::string& why) {
  return absl::StrCat(path, " is not used: ", why);
}

}  // namespace

std::string DigestManifestJson(const Checkpoint& checkpoint, DigestKind kind,
                               const std::vector<TensorDigest>& digests) {
  OrderedJson out = OrderedJson::object();
  out["format"] = kFormat;
  out["kind"] = DigestKindName(kind);
  OrderedJson files = OrderedJson::object();
  for (size_t i = 0; i < checkpoint.files.size() && i < checkpoint.stamps.size(); ++i) {
    files[checkpoint.files[i]] = {{"size", checkpoint.stamps[i].size_bytes},
                                  {"mtime_ns", checkpoint.stamps[i].mtime_ns}};
  }
  out["files"] = std::move(files);
  OrderedJson tensors = OrderedJson::object();
  for (size_t i = 0; i < checkpoint.tensors.size() && i < digests.size(); ++i) {
    tensors[checkpoint.tensors[i].name] = {{"tile_bytes", digests[i].tile_bytes},
                                           {"lanes", absl::BytesToHexString(digests[i].lanes)}};
  }
  out["tensors"] = std::move(tensors);
  return out.dump(1) + "\n";
}

absl::StatusOr<std::string> ApplyDigestManifest(Checkpoint& checkpoint, const Storage& storage) {
  const std::string path = JoinLocation(checkpoint.dir, kDigestManifestName);
  if (storage.KindOrMissing(path) == PathKind::kMissing) return std::string();
  ML_ASSIGN_OR_RETURN(std::string text, ReadSmallFile(path, kMaxManifestBytes, "digest manifest", storage));
  absl::StatusOr<Json> parsed = json_util::Parse(text, path);
  if (!parsed.ok()) return NotUsed(path, std::string(parsed.status().message()));
  const Json& manifest = *parsed;
  if (absl::Status shape = json_util::CheckObject(manifest, path, {"format", "kind", "files", "tensors"}, {});
      !shape.ok()) {
    return NotUsed(path, std::string(shape.message()));
  }
  if (!manifest["format"].is_string() || manifest["format"].get<std::string>() != kFormat) {
    return NotUsed(path, absl::StrCat("its format is not ", kFormat));
  }
  absl::StatusOr<DigestKind> kind =
      ParseDigestKind(manifest["kind"].is_string() ? manifest["kind"].get<std::string>() : "");
  if (!kind.ok()) return NotUsed(path, std::string(kind.status().message()));
  const Json& files = manifest["files"];
  const Json& tensors = manifest["tensors"];
  if (!files.is_object() || !tensors.is_object())
    return NotUsed(path, "\"files\" and \"tensors\" must be objects");
  // Every file as hashed, or the digests may be of other bytes.
  for (size_t i = 0; i < checkpoint.files.size(); ++i) {
    const std::string& file = checkpoint.files[i];
    auto it = files.find(file);
    if (it == files.end() || !it->is_object()) return NotUsed(path, absl::StrCat("it does not name ", file));
    absl::StatusOr<uint64_t> size = json_util::GetUint64(*it, "size", path);
    absl::StatusOr<int64_t> mtime = json_util::GetInt64(*it, "mtime_ns", path);
    if (!size.ok() || !mtime.ok())
      return NotUsed(path, absl::StrCat("its entry for ", file, " is malformed"));
    if (i >= checkpoint.stamps.size() || checkpoint.stamps[i].size_bytes != *size ||
        checkpoint.stamps[i].mtime_ns != *mtime) {
      return NotUsed(path,
                     absl::StrCat(file,
                                  " changed since its digests were computed (size or mtime): run `metactl "
                                  "digest ",
                                  checkpoint.dir, "` again"));
    }
  }
  std::vector<TensorDigest> digests(checkpoint.tensors.size());
  for (size_t i = 0; i < checkpoint.tensors.size(); ++i) {
    const TensorLayout& t = checkpoint.tensors[i];
    auto it = tensors.find(t.name);
    if (it == tensors.end() || !it->is_object())
      return NotUsed(path, absl::StrCat("it has no digest of ", t.name));
    absl::StatusOr<uint64_t> tile_bytes = json_util::GetUint64(*it, "tile_bytes", path);
    absl::StatusOr<std::string> hex = json_util::GetString(*it, "lanes", path);
    std::string lanes;
    if (!tile_bytes.ok() || !hex.ok() || !FromHex(*hex, &lanes)) {
      return NotUsed(path, absl::StrCat("its digest of ", t.name, " is malformed"));
    }
    digests[i] = TensorDigest{*kind, *tile_bytes, std::move(lanes)};
    if (absl::Status bad = CheckTensorDigest(digests[i], t.shape, t.dtype); !bad.ok()) {
      return NotUsed(path, absl::StrCat(t.name, ": ", bad.message()));
    }
  }
  for (size_t i = 0; i < checkpoint.tensors.size(); ++i) checkpoint.tensors[i].digest = std::move(digests[i]);
  return std::string();
}

}  // namespace metaload

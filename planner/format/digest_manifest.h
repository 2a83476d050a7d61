// The digests of a checkpoint folder kept beside it (`metactl digest DIR` writes
// DIR/metaload.digests.json): what materialize(checkpoint=), from_pretrained and StorageReader
// check a folder's bytes against when no daemon registered it (docs/integrity.md). The manifest
// names each file's size and mtime as it was hashed: it is used only while every file still
// has them, and says why not otherwise.
//
//   ML_ASSIGN_OR_RETURN(std::vector<TensorDigest> digests, DigestCheckpoint(c, kind, storage, {}));
//   const std::string json = DigestManifestJson(c, kind, digests);
//   ...
//   ML_ASSIGN_OR_RETURN(std::string note, ApplyDigestManifest(c, storage));  // c's digests set
//
// Thread-safety: reentrant.
#ifndef METALOAD_PLANNER_FORMAT_DIGEST_MANIFEST_H_
#define METALOAD_PLANNER_FORMAT_DIGEST_MANIFEST_H_

#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "planner/format/checkpoint.h"
#include "util/fs/storage.h"
#include "util/hash/tile_digest.h"

namespace metaload {

inline constexpr char kDigestManifestName[] = "metaload.digests.json";

// The manifest of `checkpoint` (opened with its files' stamps) with `digests`, one per tensor in
// checkpoint.tensors' order.
std::string DigestManifestJson(const Checkpoint& checkpoint, DigestKind kind,
                               const std::vector<TensorDigest>& digests);

// Sets the digest of every tensor of `checkpoint` from its folder's manifest, when there is one
// that fits it: every file as the manifest stamps it, every tensor in it with a digest its shape
// and dtype allow. Returns "" when applied or when there is none; otherwise why it was not used
// ("metaload.digests.json was made before model-00002-of-00002.safetensors changed: run
// `metactl digest DIR` again"), the digests left unset. Errors only for a manifest the storage
// cannot read.
absl::StatusOr<std::string> ApplyDigestManifest(Checkpoint& checkpoint, const Storage& storage = {});

}  // namespace metaload

#endif  // METALOAD_PLANNER_FORMAT_DIGEST_MANIFEST_H_

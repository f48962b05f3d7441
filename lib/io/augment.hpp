// Training-time data augmentation of image samples: random crop after zero
// padding, and random horizontal flip. The Loader applies it in fill() (on its
// prefetch thread, off the training step's critical path) to training batches
// only; evaluation batches (Coverage::All) are never augmented.
//
// Spec (--augment, config key `augment`): "crop:PAD,flip", "crop:PAD", "flip",
// in any order; "" or "none" for no augmentation.
//   crop:PAD  pads the sample by PAD pixels on each side with zeros in the
//             STORED pixel domain and crops the original H x W back out, the
//             crop's top-left corner uniform in [0, 2·PAD] on each axis. After
//             the loader's normalisation (x = v·scale[c] + shift[c]) a padded
//             pixel is shift[c], the normalised value of a stored 0: what
//             torchvision's RandomCrop(size, padding=PAD) on a uint8/PIL image
//             followed by ToTensor + Normalize gives.
//   flip      mirrors the (cropped) sample left-right with probability 1/2
//             (torchvision's RandomHorizontalFlip, applied after the crop).
// Both need images: H and W above 1, and PAD below both.
//
// Draws. A sample's crop offsets and flip are a pure function of (seed, epoch,
// the sample's index in the split): block `index` of the counter-based stream
// (seed, kAugmentStream + epoch) — one Philox block per sample. So they do not
// depend on the number of ranks, the batch size or the prefetch depth, differ
// from epoch to epoch, and repeat exactly when a run resumes from a checkpoint.
#pragma once

#include <cstdint>
#include <string>

namespace lpsgd::io {

struct Augment {
  bool crop = false;
  int64_t pad = 0;   ///< crop: padding on each side, in pixels
  bool flip = false;
  bool any() const { return crop || flip; }
  bool operator==(const Augment& o) const {
    return crop == o.crop && pad == o.pad && flip == o.flip;
  }
};

/// Parses a spec (see above). A bad one ("crop:-1", "crop:x", "blur", a
/// repeated part) is a one-line usage error naming the spec and the forms.
Augment parse_augment(const std::string& spec);
/// The canonical spec of `a` ("crop:4,flip", "flip", "none").
std::string augment_text(const Augment& a);

/// Checks that `a` applies to samples of h x w: images (h, w > 1) and a
/// padding below both. `where` starts the usage error (file and split).
void check_augment(const Augment& a, int64_t h, int64_t w, const std::string& where);

/// One sample's draw: crop offsets dy, dx in [0, 2·pad] (pad where there is
/// no crop, i.e. no shift) and the flip.
struct AugmentDraw {
  int64_t dy = 0, dx = 0;
  bool flip = false;
};
AugmentDraw augment_draw(const Augment& a, uint64_t seed, uint64_t epoch, int64_t index);

/// Writes the sample `src` ([c, h, w], already normalised) augmented by `d`
/// to `dst` (which must not overlap src): output pixel (y, x) is input pixel
/// (y + dy - pad, x' + dx - pad), x' = w-1-x when flipped else x, and
/// fill[ch] (the padding) where that lies outside the input.
void augment_sample(const Augment& a, const AugmentDraw& d, const float* src, float* dst,
                    int64_t c, int64_t h, int64_t w, const float* fill);

}  // namespace lpsgd::io

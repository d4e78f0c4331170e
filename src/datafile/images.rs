//! Image folders in the layout of torchvision's `ImageFolder`: one folder per class, the
//! classes in sorted name order, each class's images (PNG or JPEG) the files of its folder and
//! its subfolders. The listing itself is the checker's `image_folder` (in `fs`), shared with
//! the runtime.

use std::path::{Path, PathBuf};

/// The extensions of the images a class folder holds, compared without case.
pub const EXTENSIONS: [&str; 3] = ["png", "jpg", "jpeg"];

/// What `kiln check` reads of an image folder: its classes and how many images each holds.
#[derive(Clone, Debug, PartialEq)]
pub struct Classes {
    /// The class names, sorted (byte order, which is Python's code point order).
    pub names: Vec<String>,
    /// The images of each class.
    pub counts: Vec<u64>,
}

impl Classes {
    /// Every image of every class.
    pub fn images(&self) -> u64 {
        self.counts.iter().sum()
    }
}

/// An image folder listed: its classes and every image with its class, in the order of
/// `ImageFolder`'s samples (by class, then by path).
#[derive(Clone, Debug, PartialEq)]
pub struct Folder {
    /// The classes and their image counts.
    pub classes: Classes,
    /// Each image's path and class index.
    pub images: Vec<(PathBuf, usize)>,
}

/// Whether `path` names an image by its extension.
pub fn is_image(path: &Path) -> bool {
    path.extension()
        .and_then(|e| e.to_str())
        .is_some_and(|e| EXTENSIONS.iter().any(|x| e.eq_ignore_ascii_case(x)))
}

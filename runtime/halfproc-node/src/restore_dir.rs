//! `halfproc restore DIR` through the daemon: an image directory of one
//! process, or of a process tree (`tree.json` beside a directory per
//! process, written by `halfproc checkpoint` of a program with children),
//! read and checked with the client's rights, then made into what the
//! keeper starts ([`How`]).

use crate::program::{How, Pages, TreeContents, TreeImages};
use halfproc_migrate::files_img::Carried;
use halfproc_migrate::image::Manifest;
use halfproc_migrate::tree::TreeManifest;
use halfproc_migrate::Creds;
use std::fs::File;
use std::io;
use std::path::Path;

/// Why reading an image directory failed: a file access (`Denied` when
/// the client may not read it), or anything else.
pub(crate) enum ImageErr {
    Io(io::Error),
    Other(String),
}

/// What [`read_image`] gives: manifest, pages file, copied files' records.
type ImageDir = (Manifest, File, Carried);

/// A restore from a directory: what to start, the program's name, and the
/// mapped files' records to write into the copies before they run, for
/// the started process (`None`) or the tree's process of that pid.
pub(crate) struct FromDir {
    pub how: How,
    pub name: String,
    pub fills: Vec<(Option<i32>, Carried)>,
}

/// Reads the image (or tree image) in `dir` and makes the restore of it,
/// as `owner`. Called on a thread with the client's file access rights
/// ([`Creds::with_fs`]).
pub(crate) fn from_dir(dir: &Path, owner: Option<Creds>) -> Result<FromDir, ImageErr> {
    let Some(tree) = read_tree(dir)? else {
        let (m, pages, files) = read_image(dir)?;
        return Ok(FromDir {
            name: m.comm.clone(),
            // Stopped until the copied files are written in.
            how: How::Restore {
                manifest: Box::new(m),
                pages: Pages::File(pages),
                stopped: !files.is_empty(),
                owner,
            },
            fills: vec![(None, files)],
        });
    };
    let (mut manifests, mut pages, mut fills) = (Vec::new(), Vec::new(), Vec::new());
    for p in &tree.procs {
        let (m, f, files) = read_image(&dir.join(p.pid.to_string()))?;
        if m.pid != p.pid {
            return Err(ImageErr::Other(format!(
                "the image of pid {} in {} says pid {}",
                p.pid,
                dir.display(),
                m.pid
            )));
        }
        manifests.push(m);
        pages.push(f);
        fills.push((Some(p.pid), files));
    }
    Ok(FromDir {
        name: manifests[0].comm.clone(),
        how: How::RestoreTree(Box::new(TreeImages {
            tree,
            manifests,
            pages: TreeContents::Files(pages),
            owner,
        })),
        fills,
    })
}

/// `tree.json` of `dir` ([`halfproc_migrate::read_tree`]); a file access
/// that fails stays an [`ImageErr::Io`] (`Denied` when the client may not
/// read it).
fn read_tree(dir: &Path) -> Result<Option<TreeManifest>, ImageErr> {
    halfproc_migrate::read_tree(dir).map_err(|e| match e {
        halfproc_migrate::Error::Io { what, source } => {
            ImageErr::Io(io::Error::new(source.kind(), format!("{what}: {source}")))
        }
        e => ImageErr::Other(e.to_string()),
    })
}

/// The image in `dir`, its pages opened, and the records of its
/// `files.img` that hold the mapped files that differ here, checked (their
/// mappings made private memory: the copy is filled with them, streamed
/// from the file). Called on a thread with the client's file access
/// rights ([`halfproc_migrate::Creds::with_fs`]): a user may restore only
/// an image they can read, and learns nothing of one they cannot (the
/// mapped files are compared with those rights too).
fn read_image(dir: &Path) -> Result<ImageDir, ImageErr> {
    use halfproc_migrate::{files_img, image, image_dir, pages_file};
    let other = |e: halfproc_migrate::Error| ImageErr::Other(e.to_string());
    let img = image_dir::open(dir).map_err(ImageErr::Io)?;
    let text = img.read_manifest().map_err(ImageErr::Io)?;
    let mut m = image::parse_manifest(&text).map_err(other)?;
    // Streamed, in pieces of `pages_file::CHUNK` bytes: a large image
    // costs no memory of its size here. The restore reads the pages from
    // this same file, then checks the process holds them (the file may
    // change meanwhile): `pages_file::restore_file_checked`.
    pages_file::verify_pages_file(&m, &img.pages).map_err(other)?;
    let differ = halfproc_migrate::differing_files(&m).map_err(other)?;
    let files = match differ.is_empty() {
        true => None,
        false => img.files().map_err(ImageErr::Io)?,
    };
    let copies = files_img::load(files, &m, &differ).map_err(other)?;
    halfproc_migrate::copy_instead(&mut m, &differ);
    Ok((m, img.pages, copies))
}

//! `dcache mount` driven by the tools people run on it: git, rsync, tar,
//! cp, ls, find, du, and plain reads and writes through hard links. Every
//! scenario runs on both backends (`mem`, and `passthrough:` a fresh
//! directory under /dev/shm) with the default mount options, and once more
//! on a plain tmpfs directory (`scenarios_pass_on_tmpfs`) to show that each
//! scenario itself is right: what passes on tmpfs must pass on the mount.
//!
//! Without a usable /dev/fuse each mount test prints a SKIP line and
//! passes; so does a scenario whose tool (git, rsync, tar) is missing.
//! Every command runs under `timeout`, and the daemon's watchdog fails
//! every call on the mount after a few minutes, so nothing here can hang.

mod fuse_common;

use std::fs;
use std::os::unix::fs::{MetadataExt, PermissionsExt};
use std::path::Path;
use std::process::{Command, Output, Stdio};

use fuse_common::*;

/// A scenario: operate on `root` (the mount, or a tmpfs directory), with
/// `scratch`, an empty tmpfs directory, for copies made out of it.
type Scenario = fn(root: &Path, scratch: &Path);

/// Seconds any one command may run before `timeout` kills it (and its
/// process group: `sh -c` pipelines included).
const CMD_LIMIT: &str = "120";

/// Run `cmd args` in `dir` under `timeout`; stdin is /dev/null.
fn run(dir: &Path, cmd: &str, args: &[&str]) -> Output {
    Command::new("timeout")
        .args(["-k", "5", CMD_LIMIT, cmd])
        .args(args)
        .current_dir(dir)
        .env("GIT_CONFIG_NOSYSTEM", "1")
        .env("GIT_CONFIG_GLOBAL", "/dev/null")
        .env("GIT_TERMINAL_PROMPT", "0")
        .env("LC_ALL", "C")
        .stdin(Stdio::null())
        .output()
        .unwrap_or_else(|e| panic!("timeout {cmd}: {e}"))
}

/// `run`, asserting success; returns stdout.
fn ok(dir: &Path, cmd: &str, args: &[&str]) -> String {
    let out = run(dir, cmd, args);
    assert!(
        out.status.success(),
        "{cmd} {args:?} in {}: {}\nstdout: {}\nstderr: {}",
        dir.display(),
        out.status,
        String::from_utf8_lossy(&out.stdout),
        String::from_utf8_lossy(&out.stderr)
    );
    String::from_utf8_lossy(&out.stdout).into_owned()
}

/// A shell pipeline in `dir`, asserting success.
fn sh_c(dir: &Path, script: &str) -> String {
    ok(dir, "sh", &["-c", script])
}

fn s(p: &Path) -> &str {
    p.to_str().expect("utf-8 path")
}

/// Whether every tool is on PATH; prints a SKIP line if one is not.
fn have_tools(test: &str, tools: &[&str]) -> bool {
    for t in tools {
        let found = Command::new("sh")
            .args(["-c", &format!("command -v {t}")])
            .stdout(Stdio::null())
            .status()
            .map(|st| st.success())
            .unwrap_or(false);
        if !found {
            dcache_fuse::testing::skipped(format_args!("{test}: {t} not installed"));
            return false;
        }
    }
    true
}

/// `echo 3 > /proc/sys/vm/drop_caches`: the kernel forgets the dentries
/// and inodes nobody uses (on a FUSE mount: forgets sent to the daemon).
/// Prints a note and returns false when that is not allowed here.
fn drop_caches() -> bool {
    match fs::write("/proc/sys/vm/drop_caches", "3") {
        Ok(()) => true,
        Err(e) => {
            eprintln!("note: cannot drop caches ({e}); that step is skipped");
            false
        }
    }
}

/// Failures collected over a scenario, reported together, so one run
/// shows every check that failed and not only the first.
#[derive(Default)]
struct Checks(Vec<String>);

impl Checks {
    fn check(&mut self, cond: bool, what: impl FnOnce() -> String) {
        if !cond {
            self.0.push(what());
        }
    }

    fn eq<T: PartialEq + std::fmt::Debug>(&mut self, got: T, want: T, what: &str) {
        self.check(got == want, || {
            format!("{what}: got {got:?}, expected {want:?}")
        });
    }

    fn done(self, scenario: &str) {
        assert!(
            self.0.is_empty(),
            "{scenario}: {} check(s) failed:\n  {}",
            self.0.len(),
            self.0.join("\n  ")
        );
    }
}

fn meta(p: &Path) -> fs::Metadata {
    fs::symlink_metadata(p).unwrap_or_else(|e| panic!("stat {}: {e}", p.display()))
}

/// The tree the hard-link scenarios copy: `a`=`b` in one directory,
/// `x`=`sub/y` across directories, and `solo` with one link.
fn make_linked_tree(dir: &Path) {
    fs::create_dir_all(dir.join("sub")).unwrap();
    fs::write(dir.join("a"), bytes(1, 10_000)).unwrap();
    fs::hard_link(dir.join("a"), dir.join("b")).unwrap();
    fs::write(dir.join("x"), bytes(2, 3000)).unwrap();
    fs::hard_link(dir.join("x"), dir.join("sub/y")).unwrap();
    fs::write(dir.join("solo"), bytes(3, 100)).unwrap();
}

/// Check that `dir` holds the tree of `make_linked_tree`: each pair is
/// one inode with two links and the right bytes.
fn check_linked_tree(c: &mut Checks, dir: &Path, how: &str) {
    for (p, q, seed, len) in [("a", "b", 1, 10_000), ("x", "sub/y", 2, 3000)] {
        let (mp, mq) = (meta(&dir.join(p)), meta(&dir.join(q)));
        c.eq(mq.ino(), mp.ino(), &format!("{how}: st_ino of {q} vs {p}"));
        c.eq(
            (mp.nlink(), mq.nlink()),
            (2, 2),
            &format!("{how}: nlink of ({p}, {q})"),
        );
        for n in [p, q] {
            c.check(fs::read(dir.join(n)).unwrap() == bytes(seed, len), || {
                format!("{how}: content of {n}")
            });
        }
    }
    c.eq(
        meta(&dir.join("solo")).nlink(),
        1,
        &format!("{how}: nlink of solo"),
    );
}

/// Copy `root/src` out to scratch with `copy` and that copy back into
/// `root/back`, then a tree made on tmpfs into `root/in`: every copy must
/// keep the links.
fn links_survive(root: &Path, scratch: &Path, tool: &str, copy: fn(&Path, &Path)) {
    let mut c = Checks::default();
    make_linked_tree(&root.join("src"));
    let out = scratch.join("out");
    copy(&root.join("src"), &out);
    check_linked_tree(&mut c, &out, &format!("{tool} out of {}", root.display()));
    copy(&out, &root.join("back"));
    check_linked_tree(
        &mut c,
        &root.join("back"),
        &format!("{tool} back into {}", root.display()),
    );

    let reference = scratch.join("ref");
    make_linked_tree(&reference);
    copy(&reference, &root.join("in"));
    check_linked_tree(
        &mut c,
        &root.join("in"),
        &format!("{tool} into {}", root.display()),
    );
    c.done(tool);
}

fn copy_rsync(from: &Path, to: &Path) {
    let (f, t) = (format!("{}/", s(from)), format!("{}/", s(to)));
    ok(Path::new("/"), "rsync", &["-aH", &f, &t]);
}

fn copy_tar(from: &Path, to: &Path) {
    fs::create_dir(to).unwrap();
    sh_c(
        Path::new("/"),
        &format!("tar -C '{}' -cf - . | tar -C '{}' -xpf -", s(from), s(to)),
    );
}

fn copy_cp(from: &Path, to: &Path) {
    ok(Path::new("/"), "cp", &["-a", s(from), s(to)]);
}

fn rsync_keeps_links(root: &Path, scratch: &Path) {
    links_survive(root, scratch, "rsync -aH", copy_rsync);
}

fn tar_keeps_links(root: &Path, scratch: &Path) {
    links_survive(root, scratch, "tar", copy_tar);
}

fn cp_keeps_links(root: &Path, scratch: &Path) {
    links_survive(root, scratch, "cp -a", copy_cp);
}

/// git with a fixed identity and no user or system configuration.
fn git(repo: &Path, args: &[&str]) -> String {
    let mut all = vec![
        "-c",
        "user.name=dcache test",
        "-c",
        "user.email=test@dcache.invalid",
        "-c",
        "commit.gpgsign=false",
        "-c",
        "init.defaultBranch=main",
        "-c",
        "safe.directory=*",
    ];
    all.extend_from_slice(args);
    ok(repo, "git", &all)
}

/// 200 files committed; neither `git status` nor `git diff-files` (which
/// compares the index's stat data, st_ino included, without refreshing
/// it) sees a change, before and after the kernel drops its caches.
fn git_stays_clean(root: &Path, _scratch: &Path) {
    let mut c = Checks::default();
    let repo = root.join("repo");
    fs::create_dir(&repo).unwrap();
    git(&repo, &["init", "-q"]);
    for i in 0..200u64 {
        let dir = repo.join(format!("d{}/e{}", i % 5, i % 2));
        fs::create_dir_all(&dir).unwrap();
        fs::write(
            dir.join(format!("f{i}.txt")),
            bytes(i + 10, 50 + i as usize * 7),
        )
        .unwrap();
    }
    git(&repo, &["add", "-A"]);
    git(&repo, &["commit", "-q", "-m", "200 files"]);
    let files = git(&repo, &["ls-files"]);
    c.eq(files.lines().count(), 200, "git ls-files count");
    c.eq(
        git(&repo, &["diff-files", "--name-only"]),
        String::new(),
        "git diff-files after commit",
    );
    c.eq(
        git(&repo, &["status", "--porcelain"]),
        String::new(),
        "git status after commit",
    );
    if drop_caches() {
        let df = git(&repo, &["diff-files", "--name-only"]);
        c.eq(
            df.lines().count(),
            0,
            "git diff-files lines after drop_caches",
        );
        c.eq(
            git(&repo, &["status", "--porcelain"]),
            String::new(),
            "git status after drop_caches",
        );
    }
    c.done("git");
}

/// `ls -i` numbers of `names` in `dir`, in that order.
fn ls_i(dir: &Path, names: &[&str]) -> Vec<u64> {
    names
        .iter()
        .map(|n| {
            let out = ok(dir, "ls", &["-i", "-d", n]);
            out.split_whitespace().next().unwrap().parse().unwrap()
        })
        .collect()
}

/// `ls -i` shows one number for both links of a file, and the same
/// numbers after the kernel drops its caches.
fn ls_i_stable(root: &Path, _scratch: &Path) {
    let mut c = Checks::default();
    fs::create_dir(root.join("sub")).unwrap();
    fs::write(root.join("f"), b"f").unwrap();
    fs::hard_link(root.join("f"), root.join("g")).unwrap();
    fs::hard_link(root.join("f"), root.join("sub/h")).unwrap();
    fs::write(root.join("other"), b"o").unwrap();
    let names = ["f", "g", "sub/h", "other", "sub"];
    let before = ls_i(root, &names);
    c.eq(before[1], before[0], "ls -i g vs f");
    c.eq(before[2], before[0], "ls -i sub/h vs f");
    c.check(before[3] != before[0], || {
        format!("ls -i other == f: {before:?}")
    });
    if drop_caches() {
        c.eq(
            ls_i(root, &names),
            before,
            "ls -i [f, g, sub/h, other, sub] after drop_caches",
        );
    }
    c.done("ls -i");
}

/// `find DIR -samefile DIR/a` lists every link of `a` and nothing else.
fn find_samefile(root: &Path, _scratch: &Path) {
    let mut c = Checks::default();
    make_linked_tree(root);
    let r = s(root);
    for (file, want) in [("a", vec!["a", "b"]), ("sub/y", vec!["sub/y", "x"])] {
        let out = ok(root, "find", &[".", "-samefile", file]);
        let mut got: Vec<&str> = out.lines().map(|l| l.trim_start_matches("./")).collect();
        got.sort();
        c.eq(got, want, &format!("find {r} -samefile {file}"));
    }
    c.done("find -samefile");
}

/// The first field of `du` output's last line (the total with -c).
fn du_last(dir: &Path, args: &[&str]) -> u64 {
    let out = ok(dir, "du", args);
    let last = out.lines().last().expect("du output");
    last.split_whitespace().next().unwrap().parse().unwrap()
}

/// du counts a hard-linked file once: a directory with a 1 MiB file and
/// a second link to it uses what a directory with the file alone uses.
fn du_counts_once(root: &Path, _scratch: &Path) {
    let mut c = Checks::default();
    let data = bytes(4, 1 << 20);
    for d in ["one", "two"] {
        fs::create_dir(root.join(d)).unwrap();
        fs::write(root.join(d).join("big"), &data).unwrap();
    }
    fs::hard_link(root.join("one/big"), root.join("one/big2")).unwrap();
    let single = du_last(root, &["-k", "two/big"]);
    c.check(single >= 1024, || {
        format!("du -k two/big = {single}, expected >= 1024")
    });
    let both = du_last(root, &["-c", "-k", "one/big", "one/big2"]);
    c.eq(both, single, "du -c -k one/big one/big2 (total KiB)");
    let both = du_last(root, &["-c", "-b", "one/big", "one/big2"]);
    c.eq(both, 1 << 20, "du -c -b one/big one/big2 (total bytes)");
    let (one, two) = (
        du_last(root, &["-s", "-k", "one"]),
        du_last(root, &["-s", "-k", "two"]),
    );
    c.eq(one, two, "du -s -k one (big + link) vs two (big alone)");
    c.done("du");
}

/// Writes, truncation and chmod through one name are seen at once through
/// a fresh open or stat of another link (no waiting for a timeout).
fn links_coherent(root: &Path, _scratch: &Path) {
    let mut c = Checks::default();
    let (a, b, sub_c) = (root.join("a"), root.join("b"), root.join("sub/c"));
    fs::create_dir(root.join("sub")).unwrap();
    fs::write(&a, b"hello").unwrap();
    fs::hard_link(&a, &b).unwrap();
    fs::hard_link(&a, &sub_c).unwrap();
    // Read (and stat) every name once, so the kernel caches them.
    for p in [&a, &b, &sub_c] {
        c.eq(fs::read(p).unwrap(), b"hello".to_vec(), "first read");
        meta(p);
    }
    let check_all = |c: &mut Checks, want: &[u8], step: &str| {
        for (p, n) in [(&b, "b"), (&sub_c, "sub/c")] {
            c.eq(
                String::from_utf8_lossy(&fs::read(p).unwrap()).into_owned(),
                String::from_utf8_lossy(want).into_owned(),
                &format!("read {n} after {step} via a"),
            );
            c.eq(
                meta(p).len(),
                want.len() as u64,
                &format!("st_size of {n} after {step} via a"),
            );
        }
    };
    // O_TRUNC and a longer write.
    fs::write(&a, b"hello world longer").unwrap();
    check_all(&mut c, b"hello world longer", "O_TRUNC + longer write");
    // A longer write without truncating.
    {
        use std::io::Write;
        let mut f = fs::OpenOptions::new().write(true).open(&a).unwrap();
        f.write_all(b"HELLO WORLD LONGER STILL").unwrap();
    }
    check_all(
        &mut c,
        b"HELLO WORLD LONGER STILL",
        "overwrite past the end",
    );
    // Truncate shorter.
    fs::OpenOptions::new()
        .write(true)
        .open(&a)
        .unwrap()
        .set_len(3)
        .unwrap();
    check_all(&mut c, b"HEL", "ftruncate to 3");
    // chmod: mode and link count through the other names.
    fs::set_permissions(&a, fs::Permissions::from_mode(0o640)).unwrap();
    for (p, n) in [(&b, "b"), (&sub_c, "sub/c")] {
        let m = meta(p);
        c.eq(
            (m.mode() & 0o7777, m.nlink()),
            (0o640, 3),
            &format!("(mode, nlink) of {n} after chmod a"),
        );
    }
    // unlink one name: the others see nlink drop.
    fs::remove_file(&sub_c).unwrap();
    for (p, n) in [(&a, "a"), (&b, "b")] {
        c.eq(meta(p).nlink(), 2, &format!("nlink of {n} after rm sub/c"));
    }
    c.done("links coherent");
}

/// A fresh, empty directory on tmpfs (/dev/shm), or in the default
/// temporary directory where there is no /dev/shm.
fn shm_dir(prefix: &str) -> tempfile::TempDir {
    let b = tempfile::Builder::new()
        .prefix(prefix)
        .tempdir_in("/dev/shm");
    b.or_else(|_| tempfile::Builder::new().prefix(prefix).tempdir())
        .expect("tempdir")
}

/// Mount `backend` ("mem" or "passthrough", the latter on a fresh /dev/shm
/// directory) with the default options, run `scenario` on it, prune the
/// kernel's cache (SIGUSR1) and unmount: nothing may stay referenced and
/// the daemon must exit cleanly.
fn on_mount(backend: &str, test: &str, tools: &[&str], scenario: Scenario) {
    if !fuse_or_skip(test) || !have_tools(test, tools) {
        return;
    }
    let host = shm_dir("dcache-tools-host-");
    let scratch = shm_dir("dcache-tools-scratch-");
    let spec = match backend {
        "mem" => "mem".to_string(),
        _ => format!("passthrough:{}", s(host.path())),
    };
    let d = Daemon::start(&spec, &[]);
    scenario(&d.mnt, scratch.path());
    let pruned = d.prune();
    assert!(
        pruned.ends_with("0 nodes still referenced"),
        "after the scenario: {pruned}"
    );
    assert_clean_exit(d.fusermount_u());
}

/// Each scenario as two tests, one per backend, naming the tools it needs.
macro_rules! on_both {
    ($scenario:ident, [$($tool:expr),*], $mem:ident, $pt:ident) => {
        #[test]
        fn $mem() {
            on_mount("mem", stringify!($mem), &[$($tool),*], $scenario);
        }
        #[test]
        fn $pt() {
            on_mount("passthrough", stringify!($pt), &[$($tool),*], $scenario);
        }
    };
}

on_both!(git_stays_clean, ["git"], git_mem, git_passthrough);
on_both!(
    rsync_keeps_links,
    ["rsync"],
    rsync_hardlinks_mem,
    rsync_hardlinks_passthrough
);
on_both!(
    tar_keeps_links,
    ["tar"],
    tar_hardlinks_mem,
    tar_hardlinks_passthrough
);
on_both!(
    cp_keeps_links,
    [],
    cp_a_hardlinks_mem,
    cp_a_hardlinks_passthrough
);
on_both!(ls_i_stable, [], ls_i_mem, ls_i_passthrough);
on_both!(
    find_samefile,
    [],
    find_samefile_mem,
    find_samefile_passthrough
);
on_both!(du_counts_once, [], du_mem, du_passthrough);
on_both!(
    links_coherent,
    [],
    link_coherence_mem,
    link_coherence_passthrough
);

/// The self-check: every scenario passes on a plain tmpfs directory, so a
/// failure on the mount is the mount's.
#[test]
fn scenarios_pass_on_tmpfs() {
    let all: [(&str, &[&str], Scenario); 8] = [
        ("git", &["git"], git_stays_clean),
        ("rsync", &["rsync"], rsync_keeps_links),
        ("tar", &["tar"], tar_keeps_links),
        ("cp -a", &[], cp_keeps_links),
        ("ls -i", &[], ls_i_stable),
        ("find -samefile", &[], find_samefile),
        ("du", &[], du_counts_once),
        ("links coherent", &[], links_coherent),
    ];
    for (name, tools, scenario) in all {
        if !have_tools(&format!("scenarios_pass_on_tmpfs ({name})"), tools) {
            continue;
        }
        let (root, scratch) = (
            shm_dir("dcache-tools-root-"),
            shm_dir("dcache-tools-scratch-"),
        );
        scenario(root.path(), scratch.path());
    }
}

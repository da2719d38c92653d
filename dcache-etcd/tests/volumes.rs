//! Volumes: formatted, then mounted; older namespaces adopted.

mod common;

use common::{client, etcd_available, format_volume, Cluster};
use dcache::{At, Errno};
use dcache_etcd::volume::ENOMEDIUM;
use dcache_etcd::{EtcdFs, FormatOptions, Options};

fn put(ep: &str, key: &str, value: &[u8]) {
    let rt = common::rt();
    rt.block_on(async {
        let mut c = etcd_client::Client::connect([ep], None).await.unwrap();
        c.put(key, value, None).await.unwrap();
    });
}

fn del(ep: &str, key: &str) {
    let rt = common::rt();
    rt.block_on(async {
        let mut c = etcd_client::Client::connect([ep], None).await.unwrap();
        c.delete(key, None).await.unwrap();
    });
}

fn keys_under(ep: &str, prefix: &str) -> i64 {
    let rt = common::rt();
    rt.block_on(async {
        let mut c = etcd_client::Client::connect([ep], None).await.unwrap();
        let o = etcd_client::GetOptions::new()
            .with_prefix()
            .with_count_only();
        c.get(prefix, Some(o)).await.unwrap().count()
    })
}

#[test]
fn a_volume_is_formatted_then_joined() {
    if !etcd_available("a_volume_is_formatted_then_joined") {
        return;
    }
    let etcd = Cluster::start(1);
    let spec = etcd.spec("/vol");
    // Not formatted: refused, saying what to run.
    let e = EtcdFs::connect(&spec).err().expect("refused");
    assert_eq!(e.errno, ENOMEDIUM);
    let want = format!("`dcache format etcd:{spec}`");
    assert!(
        e.message.contains("prefix /vol") && e.message.contains(&want),
        "{e}"
    );
    assert!(!e.message.contains("--adopt"), "{e}");
    assert_eq!(keys_under(&etcd.endpoint(0), "/vol/"), 0, "nothing written");

    let v = format_volume(&spec);
    assert_eq!(v.prefix, "/vol");
    assert_eq!(v.record.format, dcache_etcd::volume::FORMAT_INLINE);
    let (fs, vfs) = client(&spec, Options::default());
    assert_eq!(fs.volume(), &v);
    assert_eq!(
        fs.volume().to_string(),
        format!(
            "volume {} (prefix /vol) from etcd cluster {:016x}",
            v.record.uuid, v.cluster_id
        )
    );
    assert_ne!(v.cluster_id, 0);
    vfs.as_root().mkdir(At::Root, "/d", 0o755).unwrap();
    // Formatting again is refused, whatever it holds.
    let e = dcache_etcd::format(&spec, &FormatOptions::default()).unwrap_err();
    assert_eq!(e.errno, Errno::EEXIST);
    assert!(e.message.contains(&v.record.uuid), "{e}");
    let e = dcache_etcd::format(
        &spec,
        &FormatOptions {
            adopt: true,
            ..Default::default()
        },
    )
    .unwrap_err();
    assert_eq!(e.errno, Errno::EEXIST);
    drop(vfs);
    drop(fs);

    // Destroyed: nothing left, and connecting is refused again.
    assert!(dcache_etcd::destroy(&spec).unwrap() > 0);
    assert_eq!(keys_under(&etcd.endpoint(0), "/vol/"), 0);
    assert_eq!(EtcdFs::connect(&spec).err().unwrap().errno, ENOMEDIUM);

    // A record this build cannot serve is refused with the reason.
    format_volume(&spec);
    let rec = String::from_utf8(v.record.encode()).unwrap();
    put(
        &etcd.endpoint(0),
        "/vol/volume",
        rec.replace("store inline", "store s3").as_bytes(),
    );
    let e = EtcdFs::connect(&spec).err().unwrap();
    assert_eq!(e.errno, Errno::EIO);
    assert!(e.message.contains("s3"), "{e}");
}

#[test]
fn an_older_namespace_is_adopted() {
    if !etcd_available("an_older_namespace_is_adopted") {
        return;
    }
    let etcd = Cluster::start(1);
    let ep = etcd.endpoint(0);
    let spec = etcd.volume("/old");
    {
        let (_fs, vfs) = client(&spec, Options::default());
        vfs.as_root().mkdir(At::Root, "/kept", 0o755).unwrap();
    }
    // What the backend before volumes left: no record, a heartbeat key.
    del(&ep, "/old/volume");
    put(&ep, "/old/w/h/0000-1", b"12345678");
    let e = EtcdFs::connect(&spec).err().expect("refused");
    assert_eq!(e.errno, ENOMEDIUM);
    assert!(
        e.message
            .contains(&format!("`dcache format --adopt etcd:{spec}`")),
        "{e}"
    );
    let e = dcache_etcd::format(&spec, &FormatOptions::default()).unwrap_err();
    assert_eq!(e.errno, Errno::EEXIST);
    assert!(
        e.message.contains("--adopt") && e.message.contains("prefix /old"),
        "{e}"
    );
    let v = dcache_etcd::format(
        &spec,
        &FormatOptions {
            adopt: true,
            ..Default::default()
        },
    )
    .unwrap();
    let (fs, vfs) = client(&spec, Options::default());
    assert_eq!(fs.volume().record.uuid, v.record.uuid);
    assert!(vfs.as_root().stat(At::Root, "/kept").is_ok(), "data kept");
    assert_eq!(keys_under(&ep, "/old/w/h/"), 0, "old heartbeats deleted");

    // Keys that are not a dcache namespace are never adopted.
    put(&ep, "/other/x", b"y");
    let other = etcd.spec("/other");
    for adopt in [false, true] {
        let e = dcache_etcd::format(
            &other,
            &FormatOptions {
                adopt,
                ..Default::default()
            },
        )
        .unwrap_err();
        assert_eq!(e.errno, Errno::EEXIST);
        assert!(
            e.message.contains("not a dcache namespace") || e.message.contains("no dcache root"),
            "{e}"
        );
    }
    assert_eq!(keys_under(&ep, "/other/"), 1);
}

/// `format --data DIR`: a format-2 record naming the store; a client
/// joins it and writes there; a host without the directory is refused
/// with a message naming it; `destroy` deletes the objects too; a store
/// URL holding credentials is refused before anything is written.
#[test]
fn a_volume_with_an_object_store() {
    if !etcd_available("a_volume_with_an_object_store") {
        return;
    }
    let etcd = Cluster::start(1);
    let ep = etcd.endpoint(0);
    let spec = etcd.spec("/objs");
    let e = dcache_etcd::format(
        &spec,
        &FormatOptions {
            data: Some("s3://key:secret@bucket/p".into()),
            ..Default::default()
        },
    )
    .unwrap_err();
    assert_eq!(e.errno, Errno::EINVAL);
    assert!(e.message.contains("never part of the URL"), "{e}");
    assert_eq!(keys_under(&ep, "/objs/"), 0, "nothing written");

    let store = common::TestStore::new(common::Store::Local, "").expect("a local store");
    let spec = common::object_volume(&etcd, "/objs", &store);
    let dir = store.path();
    let (fs, vfs) = client(&spec, Options::default());
    let rec = &fs.volume().record;
    assert_eq!(rec.format, 2);
    assert_eq!(rec.chunk, 64 << 20);
    let url = format!("file://{}", dir.display());
    assert_eq!(rec.store, dcache_etcd::DataStore::Objects(url.clone()));
    let f = vfs
        .as_root()
        .open(At::Root, "/f", libc::O_CREAT | libc::O_WRONLY, 0o644)
        .unwrap();
    f.write(0, b"in the store").unwrap();
    f.close().unwrap();
    assert_eq!(store.objects().len(), 1);
    drop(vfs);
    drop(fs);
    // A host where the directory is missing.
    let moved = dir.with_extension("moved");
    std::fs::rename(dir, &moved).unwrap();
    let e = EtcdFs::connect(&spec).err().expect("refused");
    assert_eq!(e.errno, Errno::ENOENT);
    assert!(e.message.contains(&dir.display().to_string()), "{e}");
    std::fs::rename(&moved, dir).unwrap();
    dcache_etcd::destroy(&spec).unwrap();
    assert_eq!(keys_under(&ep, "/objs/"), 0);
    assert!(store.objects().is_empty());
}

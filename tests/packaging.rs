//! The Debian package's pieces agree with each other and with the worker:
//! `packaging/sbworker.service` stops later than the worker drains, runs the binary and
//! the configuration the package installs, and the package's configuration is valid.
//! (`packaging/build-deb.sh`, run by CI, builds, installs and checks the package itself.)

use std::time::Duration;

fn unit() -> &'static str {
    include_str!("../packaging/sbworker.service")
}

/// The value of `key=` in the unit (the last one, as systemd reads it).
fn setting(key: &str) -> Option<&'static str> {
    unit().lines().filter_map(|l| l.strip_prefix(&format!("{key}="))).next_back()
}

#[test]
fn the_stop_timeout_is_above_the_shutdown_grace_of_the_packaged_configuration() {
    let config = sbworker::config::load(
        Some(std::path::Path::new(concat!(env!("CARGO_MANIFEST_DIR"), "/examples/sbworker.toml"))),
        &Vec::new(),
    )
    .expect("the packaged configuration is valid");
    let grace = Duration::from_millis(config.worker.shutdown_grace_ms);
    let stop = setting("TimeoutStopSec").expect("TimeoutStopSec is set");
    let stop = Duration::from_secs(stop.trim_end_matches('s').parse().expect("TimeoutStopSec in seconds"));
    // After the grace: at most 5 s giving back attempts, 2 s removing the heartbeat, and
    // the HTTP listener's close; 10 s to spare in all.
    assert!(stop >= grace + Duration::from_secs(10), "TimeoutStopSec {stop:?} against shutdown_grace_ms {grace:?}");
    assert_eq!(setting("KillSignal"), Some("SIGTERM"));
    assert_eq!(setting("Restart"), Some("on-failure"));
    assert_eq!(setting("RestartPreventExitStatus"), Some("78"), "a bad configuration is not restarted in a loop");
}

#[test]
fn the_unit_runs_what_the_package_installs() {
    let cargo = include_str!("../Cargo.toml");
    assert!(cargo.contains(r#"["target/release/sbworker", "usr/bin/", "755"]"#));
    assert!(cargo.contains(r#"["examples/sbworker.toml", "etc/sbworker/sbworker.toml", "640"]"#));
    assert!(cargo.contains(r#"["packaging/sbworker.env", "etc/sbworker/sbworker.env", "640"]"#));
    assert_eq!(setting("ExecStart"), Some("/usr/bin/sbworker run --config /etc/sbworker/sbworker.toml"));
    // RestartPreventExitStatus= concerns the main process only: a check in ExecStartPre=
    // failing would be restarted in a loop; `run` itself exits 78 on a bad configuration.
    assert_eq!(setting("ExecStartPre"), None);
    assert_eq!(setting("EnvironmentFile"), Some("-/etc/sbworker/sbworker.env"));
    assert_eq!((setting("User"), setting("Group")), (Some("sbworker"), Some("sbworker")));
    for script in [include_str!("../packaging/debian/postinst"), include_str!("../packaging/debian/postrm")] {
        assert!(script.contains("#DEBHELPER#"), "cargo-deb's systemd snippets go where #DEBHELPER# stands");
    }
    assert!(include_str!("../packaging/debian/postinst").contains("adduser --system"));
}

//! /proc/PID/stat, status (Uid, NSpid), cmdline, maps lines, mountinfo,
//! cgroup files, DRM fdinfo and the kernel's table of majors: no panic on any bytes, and generated valid files parse to
//! the fields they were generated from.

use crate::{bytes, cases, hostile_bytes, mutate, re, PARSER_CASES, ROUND_TRIP_CASES};
use gpufree::model::OwnerKind;
use gpufree::proc::drm::parse_fdinfo;
use gpufree::proc::nodes::parse_devices;
use gpufree::proc::owner::{cgroup_path, owner_from_path, parse_cgroup};
use gpufree::proc::parse::{
    escape_bytes, maps_line_inode, mountinfo_hidepid, parse_cmdline, parse_maps_line, parse_stat,
    parse_status,
};
use proptest::prelude::*;

/// The fields a generated stat line carries.
#[derive(Debug, Clone)]
pub struct StatFields {
    pub pid: u32,
    pub comm: Vec<u8>,
    pub state: char,
    pub ppid: u32,
    pub pgid: u32,
    pub sid: u32,
    pub threads: u32,
    pub start_time: u64,
    /// Fields 48 and 49, or a line cut before them (an old kernel's).
    pub arg_area: Option<(u64, u64)>,
}

impl StatFields {
    /// The line as the kernel writes it: 52 fields (44 when cut).
    pub fn line(&self) -> Vec<u8> {
        let mut f: Vec<String> = (3..=52).map(|i| (i * 7).to_string()).collect();
        f[0] = self.state.to_string();
        f[1] = self.ppid.to_string();
        f[2] = self.pgid.to_string();
        f[3] = self.sid.to_string();
        f[17] = self.threads.to_string();
        f[19] = self.start_time.to_string();
        match self.arg_area {
            Some((a, b)) => {
                f[45] = a.to_string();
                f[46] = b.to_string();
            }
            None => f.truncate(42),
        }
        let mut line = format!("{} (", self.pid).into_bytes();
        line.extend_from_slice(&self.comm);
        line.extend_from_slice(format!(") {}\n", f.join(" ")).as_bytes());
        line
    }
}

/// A comm as a hostile process may set it in a fake tree (the kernel cuts
/// at 15 bytes; a fake /proc does not): spaces, parentheses, newlines,
/// digits, escapes, invalid UTF-8.
pub fn comm() -> impl Strategy<Value = Vec<u8>> {
    prop_oneof![
        hostile_bytes(20),
        re("[a-zA-Z0-9_:.-]{0,15}").prop_map(String::into_bytes),
        Just(b"a) S 1 (b".to_vec()),
        Just(b"VLLM::Worker_TP".to_vec()),
        Just(b") R 1 2 3 (".to_vec()),
    ]
}

pub fn stat_fields() -> impl Strategy<Value = StatFields> {
    (
        any::<u32>(),
        comm(),
        proptest::sample::select(vec!['R', 'S', 'D', 'Z', 'T', 't', 'X', 'I', 'W', 'P']),
        any::<u32>(),
        any::<u32>(),
        any::<u32>(),
        any::<u32>(),
        any::<u64>(),
        proptest::option::of((any::<u64>(), any::<u64>())),
    )
        .prop_map(
            |(pid, comm, state, ppid, pgid, sid, threads, start_time, arg_area)| StatFields {
                pid,
                comm,
                state,
                ppid,
                pgid,
                sid,
                threads,
                start_time,
                arg_area,
            },
        )
}

proptest! {
    #![proptest_config(cases(ROUND_TRIP_CASES))]

    #[test]
    fn stat_round_trips(f in stat_fields()) {
        let s = parse_stat(&f.line()).expect("a generated stat line parses");
        prop_assert_eq!(s.pid, f.pid);
        prop_assert_eq!(&s.comm, &escape_bytes(&f.comm));
        prop_assert_eq!(s.state, f.state);
        prop_assert_eq!((s.ppid, s.pgid, s.sid), (f.ppid, f.pgid, f.sid));
        prop_assert_eq!(s.threads, f.threads);
        prop_assert_eq!(s.start_time, f.start_time);
        prop_assert_eq!(s.arg_area, f.arg_area);
    }

    #[test]
    fn status_round_trips(
        uid in any::<u32>(),
        nspid in proptest::collection::vec(any::<u32>(), 0..5),
        noise in proptest::collection::vec(re("[A-Za-z_]{1,12}:\t[ -~]{0,30}"), 0..8),
        order in any::<u8>(),
    ) {
        let mut lines: Vec<String> = noise
            .into_iter()
            .filter(|l| !l.starts_with("Uid:") && !l.starts_with("NSpid:"))
            .collect();
        let at = order as usize % (lines.len() + 1);
        lines.insert(at, format!("Uid:\t{uid}\t{}\t{uid}\t{uid}", uid / 2));
        if !nspid.is_empty() {
            let ns: Vec<String> = nspid.iter().map(u32::to_string).collect();
            lines.insert(lines.len() / 2, format!("NSpid:\t{}", ns.join("\t")));
        }
        let text = lines.join("\n") + "\n";
        let st = parse_status(text.as_bytes()).expect("a status with a Uid line parses");
        prop_assert_eq!(st.uid, uid);
        prop_assert_eq!(st.nspid, nspid);
    }

    #[test]
    fn cmdline_round_trips(args in proptest::collection::vec(re("[^\0]{0,20}"), 0..6), pad in 0usize..8) {
        let mut raw = args.join("\0").into_bytes();
        raw.push(0);
        raw.extend(std::iter::repeat_n(0u8, pad));
        let mut want = args.clone();
        while want.last().is_some_and(String::is_empty) {
            want.pop();
        }
        prop_assert_eq!(parse_cmdline(&raw), want);
    }

}

/// A maps line's parts.
#[derive(Debug, Clone)]
pub struct MapsFields {
    pub major: u32,
    pub minor: u32,
    pub inode: u64,
    /// Empty for an anonymous mapping; may hold spaces and invalid UTF-8,
    /// never a newline nor a leading space.
    pub path: Vec<u8>,
    pub gap: usize,
}

impl MapsFields {
    pub fn line(&self) -> Vec<u8> {
        let mut l = format!(
            "7f1c2a000000-7f1c2a200000 rw-s 00000000 {:02x}:{:02x} {}{}",
            self.major,
            self.minor,
            self.inode,
            " ".repeat(self.gap)
        )
        .into_bytes();
        l.extend_from_slice(&self.path);
        l
    }
}

fn maps_path() -> impl Strategy<Value = Vec<u8>> {
    prop_oneof![
        Just(Vec::new()),
        Just(b"[stack]".to_vec()),
        re("/[a-z0-9 /._-]{0,40}( \\(deleted\\))?").prop_map(String::into_bytes),
        hostile_bytes(16).prop_map(|mut p| {
            p.retain(|&b| b != b'\n');
            p.insert(0, b'/');
            p
        }),
    ]
}

pub fn maps_fields() -> impl Strategy<Value = MapsFields> {
    (
        any::<u32>(),
        any::<u32>(),
        any::<u64>(),
        maps_path(),
        1usize..30,
    )
        .prop_map(|(major, minor, inode, path, gap)| MapsFields {
            major,
            minor,
            inode,
            path,
            gap,
        })
}

proptest! {
    #![proptest_config(cases(ROUND_TRIP_CASES))]

    #[test]
    fn maps_lines_round_trip(f in maps_fields()) {
        let line = f.line();
        let e = parse_maps_line(&line).expect("a generated maps line parses");
        prop_assert_eq!((e.major, e.minor, e.inode), (f.major, f.minor, f.inode));
        prop_assert_eq!(e.path, &f.path[..]);
        prop_assert_eq!(maps_line_inode(&line), Some(f.inode));
    }

    #[test]
    fn mountinfo_hidepid_round_trips(
        mount_id in 1u32..10_000,
        opt in proptest::sample::select(vec!["0", "off", "1", "2", "invisible", "noaccess"]),
        other in re("/[a-z]{1,8}"),
    ) {
        prop_assume!(other != "/proc");
        let mi = format!(
            "{mount_id} 1 0:21 / {other} rw - tmpfs tmpfs rw\n\
             {mount_id} 1 0:22 / /proc rw,nosuid - proc proc rw,hidepid={opt}\n"
        );
        prop_assert_eq!(mountinfo_hidepid(mi.as_bytes(), b"/proc"), !matches!(opt, "0" | "off"));
        prop_assert!(!mountinfo_hidepid(mi.as_bytes(), other.as_bytes()));
    }
}

/// A cgroup path of a known owner, and what it must parse to.
fn owned_path() -> impl Strategy<Value = (String, OwnerKind, String)> {
    let hex64 = re("[0-9a-f]{64}");
    let unit = re("[a-z][a-z0-9_-]{0,20}");
    prop_oneof![
        unit.prop_map(|u| (
            format!("/system.slice/{u}.service"),
            OwnerKind::SystemdUnit,
            format!("{u}.service")
        )),
        re("[0-9a-f]{64}").prop_map(|id| (
            format!("/system.slice/docker-{id}.scope"),
            OwnerKind::Container,
            id
        )),
        re("[0-9a-f]{64}").prop_map(|id| (format!("/docker/{id}"), OwnerKind::Container, id)),
        (re("[0-9a-f]{8}"), re("[0-9a-f]{4}"), re("[0-9a-f]{12}"), hex64).prop_map(|(a, b, c, id)| {
            let uid = format!("{a}-{b}-{b}-{b}-{c}");
            (
                format!(
                    "/kubepods.slice/kubepods-burstable.slice/kubepods-burstable-pod{}.slice/cri-containerd-{id}.scope",
                    uid.replace('-', "_")
                ),
                OwnerKind::K8sPod,
                uid,
            )
        }),
        (any::<u32>(), any::<u32>(), 0u32..100).prop_map(|(uid, job, step)| (
            format!("/slurm/uid_{uid}/job_{job}/step_{step}/task_0"),
            OwnerKind::SlurmJob,
            job.to_string()
        )),
        (any::<u32>(), 1u32..100_000).prop_map(|(uid, s)| (
            format!("/user.slice/user-{uid}.slice/session-{s}.scope"),
            OwnerKind::Session,
            format!("session-{s}")
        )),
    ]
}

/// Lines of a /proc/PID/cgroup file: v1 controllers, then maybe the v2 line.
fn cgroup_lines() -> impl Strategy<Value = Vec<u8>> {
    let line = prop_oneof![
        hostile_bytes(30),
        (
            re("[0-9]{1,2}"),
            re("(memory|devices|cpu,cpuacct|name=systemd|)"),
            re("/[ -~]{0,60}")
        )
            .prop_map(|(id, c, p)| format!("{id}:{c}:{p}").into_bytes()),
        owned_path().prop_map(|(p, _, _)| format!("0::{p}").into_bytes()),
    ];
    proptest::collection::vec(line, 0..6).prop_map(|ls| ls.join(&b'\n'))
}

proptest! {
    #![proptest_config(cases(ROUND_TRIP_CASES))]

    #[test]
    fn cgroup_owners_round_trip(
        (path, kind, id) in owned_path(),
        v1 in proptest::collection::vec(re("[0-9]{1,2}:(memory|devices|cpu):/[a-z/]{0,20}"), 0..4),
    ) {
        let mut text = v1.join("\n");
        text.push_str(&format!("\n0::{path}\n"));
        let (p, owner) = parse_cgroup(text.as_bytes());
        prop_assert_eq!(&p, &path, "the v2 line wins");
        prop_assert_eq!(owner.kind, kind);
        prop_assert_eq!(owner.id, id);
    }

    /// Trust III: below a user's manager or a container's own cgroup, a
    /// root-made layout is only claimed; the owner stays the user's or
    /// the container's.
    #[test]
    fn delegated_cgroups_only_claim_what_they_name(
        (path, kind, id) in owned_path(),
        uid in any::<u32>(),
        outer in re("[0-9a-f]{64}"),
    ) {
        let claimable = matches!(kind, OwnerKind::Container | OwnerKind::K8sPod | OwnerKind::SlurmJob);
        let claim = |o: &gpufree::model::Owner| o.claims.clone().map(|c| (c.kind, c.id));
        let user = owner_from_path(&format!(
            "/user.slice/user-{uid}.slice/user@{uid}.service/app.slice{path}"
        ));
        if kind == OwnerKind::SystemdUnit {
            prop_assert_eq!(&user.name, &format!("{id} (user {uid})"));
        } else {
            prop_assert_eq!((user.kind, user.id.clone()), (OwnerKind::Session, format!("user@{uid}.service")));
        }
        prop_assert_eq!(claim(&user), claimable.then_some((kind, id.clone())));
        let contained = owner_from_path(&format!("/system.slice/docker-{outer}.scope{path}"));
        prop_assert_eq!((contained.kind, contained.id.clone()), (OwnerKind::Container, outer));
        prop_assert_eq!(claim(&contained), claimable.then_some((kind, id)));
    }

}

/// A cgroup line of 64 KiB (a hostile unit or scope name) is parsed, not a
/// panic, and its owner is the whole name.
#[test]
fn a_64k_unit_name_in_a_cgroup() {
    let name = format!("{}.service", "x".repeat(64 * 1024));
    let (_, o) = parse_cgroup(format!("0::/system.slice/{name}\n").as_bytes());
    assert_eq!(o.kind, OwnerKind::SystemdUnit);
    assert_eq!(o.id, name);
}

/// Input for every /proc parser at once: arbitrary bytes, hostile
/// fragments, and each file's valid form damaged (cut, a byte changed,
/// inserted or deleted, junk spliced in), so that each parser sees input a
/// step from valid as well as the others' files.
fn proc_file() -> impl Strategy<Value = Vec<u8>> {
    let valid = prop_oneof![
        stat_fields().prop_map(|f| f.line()),
        Just(b"Name:\tx\nUid:\t1000\t1000\t1000\t1000\nNSpid:\t7\t1\n".to_vec()),
        re("(Uid|NSpid|Name):[ \t0-9a-z\n]{0,40}").prop_map(String::into_bytes),
        maps_fields().prop_map(|f| f.line()),
        cgroup_lines(),
        (owned_path(), re("[ -~]{0,20}"))
            .prop_map(|((p, _, _), tail)| format!("{p}{tail}").into_bytes()),
        Just(b"22 1 0:21 / /proc rw,nosuid - proc proc rw,hidepid=invisible\n".to_vec()),
        re("(drm-(driver|client-id|pdev|total-vram|memory-gtt|resident-vram0):[ \t]{0,2}[0-9a-z:.]{0,12}( KiB| MiB)?\n){1,6}")
            .prop_map(String::into_bytes),
        re("((pdev|pasid|vram mem|gtt mem):[ \t]{0,2}[0-9a-f:.]{0,12}( kB)?\n){1,4}")
            .prop_map(String::into_bytes),
    ];
    let valid = crate::pool(valid, 4096);
    prop_oneof![
        1 => bytes(300),
        1 => hostile_bytes(60),
        4 => valid.prop_flat_map(mutate),
    ]
}

proptest! {
    #![proptest_config(cases(PARSER_CASES))]

    /// stat, status, cmdline, maps lines, mountinfo, cgroup and cgroup
    /// paths: 100,000 inputs each, none panics, and what they accept obeys
    /// each format's rules.
    #[test]
    fn proc_parsers_never_panic(input in proc_file()) {
        if let Ok(s) = parse_stat(&input) {
            // comm comes from between the first '(' and the last ')'.
            prop_assert!(input.contains(&b'(') && input.contains(&b')'));
            prop_assert!(s.comm.len() <= 4 * input.len());
        }
        match parse_status(&input) {
            Ok(_) => prop_assert!(input.windows(4).any(|w| w == b"Uid:")),
            Err(e) => prop_assert_eq!(e.file, "status"),
        }
        let args = parse_cmdline(&input);
        prop_assert!(args.len() <= input.len() + 1);
        // Escaping is lossless: valid text as is, each invalid byte as \xNN.
        let e = escape_bytes(&input);
        match std::str::from_utf8(&input) {
            Ok(s) => prop_assert_eq!(e.as_str(), s),
            Err(_) => prop_assert!(e.contains("\\x")),
        }
        for line in input.split(|&b| b == b'\n') {
            if let Some(m) = parse_maps_line(line) {
                prop_assert!(m.path.len() <= line.len());
                prop_assert_eq!(maps_line_inode(line), Some(m.inode));
            }
        }
        let _ = mountinfo_hidepid(&input, b"/proc");
        let (path, owner) = parse_cgroup(&input);
        prop_assert_eq!(path.is_empty(), cgroup_path(&input).is_none());
        if path.is_empty() {
            prop_assert_eq!(owner.kind, OwnerKind::None);
        }
        let o = owner_from_path(&String::from_utf8_lossy(&input));
        if o.kind == OwnerKind::None {
            prop_assert!(o.id.is_empty());
        }
        // A DRM client needs its driver and a client id (amdgpu's older
        // lines: its pasid), and every region it reports was named on a
        // line of its own.
        if let Some(f) = parse_fdinfo(&input) {
            prop_assert!(!f.driver.is_empty());
            prop_assert!(
                input.windows(14).any(|w| w == b"drm-client-id:")
                    || input.windows(6).any(|w| w == b"pasid:")
            );
            prop_assert!(f.regions.len() <= input.split(|&b| b == b'\n').count());
        }
    }
}

/// The kernel's table of majors (`/proc/devices`) as it writes it: the
/// character devices (`%3d %s`), then the block devices.
fn devices_table(chars: &[(u32, String)]) -> Vec<u8> {
    let mut t = String::from("Character devices:\n");
    for (major, name) in chars {
        t.push_str(&format!("{major:>3} {name}\n"));
    }
    t.push_str("\nBlock devices:\n  7 loop\n259 blkext\n");
    t.into_bytes()
}

/// Registrations: a major and a name of any printable text but a newline
/// (the kernel writes what the driver gave).
fn registrations() -> impl Strategy<Value = Vec<(u32, String)>> {
    proptest::collection::vec((0u32..4096, re("[a-z0-9/_ .:-]{1,24}")), 0..16)
}

proptest! {
    #![proptest_config(cases(ROUND_TRIP_CASES))]

    #[test]
    fn devices_tables_round_trip(chars in registrations()) {
        prop_assert_eq!(parse_devices(&devices_table(&chars)), Ok(chars));
    }
}

proptest! {
    #![proptest_config(cases(PARSER_CASES))]

    /// The table of majors, cut, corrupted or arbitrary: no panic, and
    /// what it gives comes from lines of a character section.
    #[test]
    fn devices_tables_never_panic(input in prop_oneof![
        1 => bytes(300),
        1 => hostile_bytes(60),
        4 => registrations().prop_flat_map(|c| mutate(devices_table(&c))),
    ]) {
        if let Ok(table) = parse_devices(&input) {
            prop_assert!(input.windows(18).any(|w| w == b"Character devices:"));
            for (_, name) in &table {
                prop_assert!(!name.is_empty() && !name.contains('\n'));
            }
            prop_assert!(table.len() <= input.split(|&b| b == b'\n').count());
        }
    }
}

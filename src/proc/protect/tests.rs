//! Tests of `protect.rs`.

use super::*;

#[test]
fn protected_programs_by_exe_or_comm() {
    let pd = Some("/usr/bin/nvidia-persistenced");
    let sys = Named::Candidate(Protection::System);
    let user = Named::Candidate(Protection::User);
    assert_eq!(named("nvidia-persiste", pd, true, 998), sys);
    // A user's own copy of the daemon is not one, nor the real binary
    // run by a person's account.
    assert_eq!(
        named("nvidia-persiste", pd, false, 1000),
        Named::Not(NotProtected::UntrustedExe)
    );
    assert_eq!(
        named("nvidia-persiste", pd, true, 1000),
        Named::Not(NotProtected::PersonsAccount)
    );
    assert_eq!(
        named("Xwayland", Some("/usr/bin/Xwayland"), true, 1000),
        user
    );
    assert_eq!(named("nvidia-persiste", None, false, 998), Named::ByComm);
    assert_eq!(
        named("nvidia-persiste", None, false, 1000),
        Named::Not(NotProtected::Unverified {
            unread: "executable".into()
        })
    );
    assert_eq!(named("Xorg", Some("/usr/lib/xorg/Xorg"), true, 0), sys);
    assert_eq!(
        named("Xorg", Some("/usr/lib/xorg/Xorg (deleted)"), true, 0),
        sys
    );
    assert_eq!(
        named("python3", Some("/usr/bin/python3.12"), true, 0),
        Named::Other
    );
    // A renamed worker cannot make itself protected: the exe decides.
    assert_eq!(
        named("Xorg", Some("/usr/bin/python3.12"), true, 0),
        Named::Other
    );
    assert_eq!(named("python3", None, false, 0), Named::Other);
}

const LIBC: &[u8] = b"7f00-7f01 r-xp 00028000 08:01 1002 /usr/lib/x86_64-linux-gnu/libc.so.6\n";

fn maps(lines: &[&[u8]]) -> Vec<u8> {
    let mut m = b"55d0-55d1 r--p 00000000 08:01 1001 /usr/bin/Xorg\n\
        55d1-55d2 r-xp 00001000 08:01 1001 /usr/bin/Xorg\n\
        7ff0-7ff1 rw-p 00000000 00:00 0 [stack]\n"
        .to_vec();
    m.extend_from_slice(LIBC);
    for l in lines {
        m.extend_from_slice(l);
        m.push(b'\n');
    }
    m.extend_from_slice(b"ffffffffff600000-ffffffffff601000 --xp 00000000 00:00 0 [vsyscall]");
    m
}

#[test]
fn foreign_code_is_an_executable_file_outside_the_system_dirs() {
    let exe = b"/usr/bin/Xorg".as_slice();
    assert_eq!(foreign_code(&maps(&[]), exe), None);
    // JIT and vDSO memory, shared anonymous memory, and mappings of
    // files elsewhere that are not executable are the program's own.
    let own: [&[u8]; 6] = [
        b"7e00-7e01 rwxp 00000000 00:00 0 ",
        b"7e02-7e03 r-xp 00000000 00:00 0 [vdso]",
        b"7e04-7e05 r-xs 00000000 00:01 77 /dev/zero (deleted)",
        b"7e06-7e07 r--p 00000000 08:01 9 /home/alice/.cache/fontconfig/x.cache",
        b"7e08-7e09 rw-s 00000000 00:05 3 /dev/nvidia0",
        b"7e0a-7e0b r-xp 00000000 00:00 0 [anon:v8 code]",
    ];
    assert_eq!(foreign_code(&maps(&own), exe), None);
    // An upgraded library keeps its place; the site's /usr/local/lib
    // and Xorg's modules are system directories.
    let system: [&[u8]; 3] = [
        b"7d00-7d01 r-xp 00000000 08:01 5 /usr/lib/x86_64-linux-gnu/libm.so.6 (deleted)",
        b"7d02-7d03 r-xp 00000000 08:01 6 /usr/local/lib/libsite.so",
        b"7d04-7d05 r-xp 00000000 08:01 7 /usr/lib/xorg/modules/drivers/nvidia_drv.so",
    ];
    assert_eq!(foreign_code(&maps(&system), exe), None);
    for (line, path) in [
        (
            b"7c00-7c01 r-xp 00000000 08:01 8 /tmp/x/libevil.so".as_slice(),
            b"/tmp/x/libevil.so".as_slice(),
        ),
        (
            b"7c00-7c01 r-xp 00000000 00:01 9 /memfd:jit (deleted)",
            b"/memfd:jit (deleted)",
        ),
        (
            b"7c00-7c01 r-xp 00000000 08:01 8 /home/u/a b/\xfe.so (deleted)",
            b"/home/u/a b/\xfe.so (deleted)",
        ),
        // Prefixes of a system directory's name are other directories.
        (
            b"7c00-7c01 r-xp 00000000 08:01 8 /usr/libevil/x.so",
            b"/usr/libevil/x.so",
        ),
        (b"7c00-7c01 r-xp 00000000 08:01 8 /usr/lib", b"/usr/lib"),
        // Another program than the executable, even a system one.
        (
            b"7c00-7c01 r-xp 00000000 08:01 8 /usr/bin/python3.12",
            b"/usr/bin/python3.12",
        ),
    ] {
        assert_eq!(foreign_code(&maps(&[line]), exe), Some(path));
    }
    // Truncated or malformed lines are skipped, not believed.
    assert_eq!(foreign_code(b"7c00-7c01 r-xp", exe), None);
}

#[test]
fn a_preload_or_foreign_code_disqualifies_and_a_persons_candidate_must_show_all() {
    let exe = b"/usr/bin/Xorg".as_slice();
    let m = maps(&[]);
    let clean = Evidence {
        environ: Some(b"PATH=/bin\0"),
        maps: Some(&m),
        own_user_ns: Some(true),
    };
    for reach in [Protection::System, Protection::User] {
        assert_eq!(judge(reach, exe, &clean), Ok(reach));
        let preload = Evidence {
            environ: Some(b"LD_PRELOAD=/usr/lib/x86_64-linux-gnu/libm.so.6\0"),
            ..clean
        };
        assert_eq!(
            judge(reach, exe, &preload),
            Err(NotProtected::Preload {
                variable: "LD_PRELOAD".into(),
                value: "/usr/lib/x86_64-linux-gnu/libm.so.6".into()
            })
        );
        let evil = maps(&[b"7c00-7c01 r-xp 00000000 08:01 8 /tmp/e.so"]);
        let foreign = Evidence {
            maps: Some(&evil),
            ..clean
        };
        assert_eq!(
            judge(reach, exe, &foreign),
            Err(NotProtected::ForeignCode {
                path: "/tmp/e.so".into()
            })
        );
    }
    // Unreadable: a system account keeps today's rule, a person's
    // process is not protected.
    let blind = Evidence::default();
    assert_eq!(
        judge(Protection::System, exe, &blind),
        Ok(Protection::System)
    );
    assert_eq!(
        judge(Protection::User, exe, &blind),
        Err(NotProtected::Unverified {
            unread: "environment".into()
        })
    );
    let no_maps = Evidence {
        maps: None,
        ..clean
    };
    assert_eq!(
        judge(Protection::User, exe, &no_maps),
        Err(NotProtected::Unverified {
            unread: "memory map".into()
        })
    );
    let other_ns = Evidence {
        own_user_ns: Some(false),
        ..clean
    };
    assert_eq!(
        judge(Protection::User, exe, &other_ns),
        Err(NotProtected::UserNamespace)
    );
    assert_eq!(
        judge(Protection::System, exe, &other_ns),
        Ok(Protection::System)
    );
}

#[test]
fn uid_min_comes_from_login_defs() {
    let defs = b"# comment UID_MIN 7\nMAIL_DIR /var/mail\nUID_MIN\t\t  500\nUID_MAX 60000\n";
    assert_eq!(login_defs_uid_min(defs), Some(500));
    assert_eq!(login_defs_uid_min(b"UID_MAX 60000\n"), None);
    assert_eq!(login_defs_uid_min(b"UID_MIN x\n"), None);
    assert_eq!(login_defs_uid_min(b"\xff\xfe"), None);
}

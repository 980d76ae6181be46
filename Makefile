# prefetchd: `make run` builds and starts the daemon; `make test` runs every check. Both install what they need.

SWIFT ?= swift
# What building and running need, and what the tests need besides.
BUILD_PACKAGES := libcurl4-openssl-dev libsqlite3-dev libgdk-pixbuf-2.0-dev libssl-dev pkg-config webp-pixbuf-loader libavif-gdk-pixbuf
TEST_PACKAGES := python3 sqlite3 squid tmux imagemagick systemd util-linux iproute2 man-db groff-base zsh fish chafa openssl \
	python3-dbusmock python3-h2 dbus-daemon dbus-bin faketime
# Where `release` builds; `make check-systemd BUILD_DIR=/tmp/x` keeps a second build apart.
BUILD_DIR ?= .build
RELEASE_FLAGS := -c release --static-swift-stdlib --scratch-path $(BUILD_DIR)

# `make install`: PREFIX (default /usr/local) and DESTDIR (a staging root). With PREFIX=/usr the system units go where
# Debian keeps packaged ones, /lib/systemd/system. The user units (systemctl --user) go to $(PREFIX)/lib/systemd/user:
# /usr/local/lib/systemd/user and /usr/lib/systemd/user are on the user manager's search path, /lib/systemd/user is
# not (systemd.unit(5), `systemd-analyze --user unit-paths`).
PREFIX ?= /usr/local
DESTDIR ?=
BINDIR ?= $(PREFIX)/bin
ifeq ($(PREFIX),/usr)
UNITDIR ?= /lib/systemd/system
else
UNITDIR ?= $(PREFIX)/lib/systemd/system
endif
USERUNITDIR ?= $(PREFIX)/lib/systemd/user
SYSUSERSDIR ?= $(PREFIX)/lib/sysusers.d
TMPFILESDIR ?= $(PREFIX)/lib/tmpfiles.d
SYSCONFDIR ?= /etc
MANDIR ?= $(PREFIX)/share/man
DOCDIR ?= $(PREFIX)/share/doc/prefetchd
BASHCOMPDIR ?= $(PREFIX)/share/bash-completion/completions
ZSHCOMPDIR ?= $(PREFIX)/share/zsh/site-functions
FISHCOMPDIR ?= $(PREFIX)/share/fish/vendor_completions.d
# The highest `systemd-analyze security` exposure accepted for prefetchd.service (its scale: 0.0 to 10.0).
SECURITY_THRESHOLD := 1.5

.PHONY: all deps test-deps build release test check-core check-systemd install uninstall run clean

all: build

# Installs the Debian packages in $(1) that are missing (apt-get as root; otherwise prints the command and fails).
define apt_install
	@missing=""; \
	for package in $(1); do \
		dpkg-query -W -f='$${Status}' $$package 2>/dev/null | grep -q 'install ok installed' || missing="$$missing $$package"; \
	done; \
	if [ -n "$$missing" ]; then \
		if [ "$$(id -u)" = 0 ]; then \
			echo "installing:$$missing"; \
			apt-get update -qq && DEBIAN_FRONTEND=noninteractive apt-get install -y -qq --no-install-recommends $$missing; \
		else \
			echo "missing Debian packages:$$missing"; \
			echo "run: sudo apt-get install -y$$missing"; \
			exit 1; \
		fi; \
	fi
endef

## deps: the Debian packages the build needs
deps:
	$(call apt_install,$(BUILD_PACKAGES))

## test-deps: what the tests use besides (squid, tmux, sqlite3, Python's prometheus_client)
test-deps: deps
	$(call apt_install,$(TEST_PACKAGES))
	@python3 -c 'import prometheus_client' 2>/dev/null || python3 -m pip install --quiet prometheus_client

build: deps
	$(SWIFT) build

# prefetchctl starts once per `get` from a shell: linked fully static (no dynamic loader, no shared libraries to map)
# it starts in half the time. Its flags differ from the daemon's (which needs the system's libcurl and gdk-pixbuf),
# so it builds in a scratch directory of its own and is copied beside the daemon. The linker's warnings about
# getpwnam and the like concern Foundation code prefetchctl never calls.
release: deps
	$(SWIFT) build $(RELEASE_FLAGS) --product prefetchd
	$(SWIFT) build -c release --static-swift-stdlib --scratch-path $(BUILD_DIR)/static-prefetchctl --product prefetchctl \
		-Xswiftc -static-executable
	install -m 0755 $(BUILD_DIR)/static-prefetchctl/release/prefetchctl $(BUILD_DIR)/release/prefetchctl

## test: the whole suite plus the project's static checks
test: test-deps check-core check-systemd stress-quick lab-test
	$(SWIFT) build --build-tests
	$(SWIFT) test --no-parallel

## check-core: QueueCore stays pure (the Swift standard library only)
check-core:
	@if grep -rn '^import' Sources/QueueCore; then echo "QueueCore must import nothing but the standard library"; exit 1; fi

## run: release build, then the daemon in the foreground with its embedded defaults
run: release
	$(BUILD_DIR)/release/prefetchd

## install: release binaries (static Swift runtime), systemd units (system and user), sysusers/tmpfiles snippets, the
## example configuration, man pages and shell completions, under $(DESTDIR)$(PREFIX)
install: release
	install -d $(DESTDIR)$(BINDIR) $(DESTDIR)$(UNITDIR) $(DESTDIR)$(USERUNITDIR) $(DESTDIR)$(SYSUSERSDIR) \
		$(DESTDIR)$(TMPFILESDIR) $(DESTDIR)$(SYSCONFDIR)/prefetchd $(DESTDIR)$(MANDIR)/man1 $(DESTDIR)$(MANDIR)/man5 $(DESTDIR)$(MANDIR)/man8 \
		$(DESTDIR)$(DOCDIR) $(DESTDIR)$(BASHCOMPDIR) $(DESTDIR)$(ZSHCOMPDIR) $(DESTDIR)$(FISHCOMPDIR)
	install -m 0755 $(BUILD_DIR)/release/prefetchd $(BUILD_DIR)/release/prefetchctl $(DESTDIR)$(BINDIR)/
	sed 's|/usr/local/bin/|$(BINDIR)/|g' systemd/prefetchd.service > $(DESTDIR)$(UNITDIR)/prefetchd.service
	chmod 0644 $(DESTDIR)$(UNITDIR)/prefetchd.service
	install -m 0644 systemd/prefetchd.socket $(DESTDIR)$(UNITDIR)/prefetchd.socket
	sed 's|/usr/local/bin/|$(BINDIR)/|g' systemd/user/prefetchd.service > $(DESTDIR)$(USERUNITDIR)/prefetchd.service
	chmod 0644 $(DESTDIR)$(USERUNITDIR)/prefetchd.service
	install -m 0644 systemd/user/prefetchd.socket $(DESTDIR)$(USERUNITDIR)/prefetchd.socket
	install -m 0644 systemd/prefetchd.sysusers $(DESTDIR)$(SYSUSERSDIR)/prefetchd.conf
	install -m 0644 systemd/prefetchd.tmpfiles $(DESTDIR)$(TMPFILESDIR)/prefetchd.conf
	install -m 0644 systemd/prefetchd.conf.example $(DESTDIR)$(SYSCONFDIR)/prefetchd/prefetchd.conf.example
	install -m 0644 docs/man/prefetchctl.1 $(DESTDIR)$(MANDIR)/man1/prefetchctl.1
	install -m 0644 docs/man/prefetchd.conf.5 $(DESTDIR)$(MANDIR)/man5/prefetchd.conf.5
	install -m 0644 docs/man/prefetchd.8 $(DESTDIR)$(MANDIR)/man8/prefetchd.8
	install -m 0644 README.md docs/configuration.md docs/protocol.md $(DESTDIR)$(DOCDIR)/
	install -m 0644 completions/prefetchctl.bash $(DESTDIR)$(BASHCOMPDIR)/prefetchctl
	install -m 0644 completions/_prefetchctl $(DESTDIR)$(ZSHCOMPDIR)/_prefetchctl
	install -m 0644 completions/prefetchctl.fish $(DESTDIR)$(FISHCOMPDIR)/prefetchctl.fish

## uninstall: removes what install put there (not /etc/prefetchd/prefetchd.conf, the cache or the users)
uninstall:
	rm -f $(DESTDIR)$(BINDIR)/prefetchd $(DESTDIR)$(BINDIR)/prefetchctl \
		$(DESTDIR)$(UNITDIR)/prefetchd.service $(DESTDIR)$(UNITDIR)/prefetchd.socket \
		$(DESTDIR)$(USERUNITDIR)/prefetchd.service $(DESTDIR)$(USERUNITDIR)/prefetchd.socket \
		$(DESTDIR)$(SYSUSERSDIR)/prefetchd.conf $(DESTDIR)$(TMPFILESDIR)/prefetchd.conf \
		$(DESTDIR)$(SYSCONFDIR)/prefetchd/prefetchd.conf.example \
		$(DESTDIR)$(MANDIR)/man1/prefetchctl.1 $(DESTDIR)$(MANDIR)/man5/prefetchd.conf.5 $(DESTDIR)$(MANDIR)/man8/prefetchd.8 \
		$(DESTDIR)$(DOCDIR)/README.md $(DESTDIR)$(DOCDIR)/configuration.md $(DESTDIR)$(DOCDIR)/protocol.md \
		$(DESTDIR)$(BASHCOMPDIR)/prefetchctl $(DESTDIR)$(ZSHCOMPDIR)/_prefetchctl $(DESTDIR)$(FISHCOMPDIR)/prefetchctl.fish
	-rmdir $(DESTDIR)$(SYSCONFDIR)/prefetchd $(DESTDIR)$(DOCDIR) 2>/dev/null

## check-systemd: `make install` into a scratch DESTDIR, then offline checks of that tree: every file in place, no
## Swift runtime library in `ldd` of the binaries, `systemd-analyze verify` and `systemd-analyze --user verify` clean
## (the units' paths pointed into the tree, man pages found there), the user units' directory on the user manager's
## search path, `systemd-analyze security` at most $(SECURITY_THRESHOLD), the sysusers and tmpfiles
## snippets applied to the scratch root, the completions and man pages well-formed, and `make uninstall` leaving no
## file behind. Boots nothing, starts nothing.
check-systemd: release
	@set -e; root=$$(mktemp -d /tmp/prefetchd-install.XXXXXX); trap 'rm -rf "$$root"' EXIT; \
	$(MAKE) --no-print-directory install DESTDIR=$$root PREFIX=/usr/local BUILD_DIR=$(BUILD_DIR) > $$root.log 2>&1 \
		|| { cat $$root.log; rm -f $$root.log; exit 1; }; rm -f $$root.log; \
	for file in usr/local/bin/prefetchd usr/local/bin/prefetchctl usr/local/lib/systemd/system/prefetchd.service \
		usr/local/lib/systemd/system/prefetchd.socket usr/local/lib/systemd/user/prefetchd.service \
		usr/local/lib/systemd/user/prefetchd.socket usr/local/lib/sysusers.d/prefetchd.conf \
		usr/local/lib/tmpfiles.d/prefetchd.conf etc/prefetchd/prefetchd.conf.example \
		usr/local/share/man/man1/prefetchctl.1 usr/local/share/man/man5/prefetchd.conf.5 \
		usr/local/share/man/man8/prefetchd.8 usr/local/share/bash-completion/completions/prefetchctl \
		usr/local/share/zsh/site-functions/_prefetchctl usr/local/share/fish/vendor_completions.d/prefetchctl.fish; do \
		[ -f "$$root/$$file" ] || { echo "check-systemd: make install did not install /$$file"; exit 1; }; \
	done; \
	for binary in prefetchd prefetchctl; do \
		if ldd "$$root/usr/local/bin/$$binary" 2>/dev/null | grep -E 'libswift|libFoundation|lib_Foundation|libdispatch|libBlocksRuntime'; then \
			echo "check-systemd: $$binary links the Swift runtime dynamically (see above)"; exit 1; \
		fi; \
	done; \
	"$$root/usr/local/bin/prefetchd" --check-config --config "$$root/etc/prefetchd/prefetchd.conf.example" > /dev/null; \
	mkdir "$$root/verify"; \
	for unit in prefetchd.service prefetchd.socket; do \
		sed "s|/usr/local/bin/|$$root/usr/local/bin/|g" "$$root/usr/local/lib/systemd/system/$$unit" > "$$root/verify/$$unit"; \
	done; \
	out=$$(MANPATH="$$root/usr/local/share/man" systemd-analyze verify "$$root/verify/prefetchd.socket" \
		"$$root/verify/prefetchd.service" 2>&1) || { echo "$$out"; echo "check-systemd: systemd-analyze verify failed"; exit 1; }; \
	[ -z "$$out" ] || { echo "$$out"; echo "check-systemd: systemd-analyze verify is not clean"; exit 1; }; \
	mkdir "$$root/verify-user" "$$root/xdg-runtime"; chmod 0700 "$$root/xdg-runtime"; \
	for unit in prefetchd.service prefetchd.socket; do \
		sed "s|/usr/local/bin/|$$root/usr/local/bin/|g" "$$root/usr/local/lib/systemd/user/$$unit" > "$$root/verify-user/$$unit"; \
	done; \
	out=$$(XDG_RUNTIME_DIR="$$root/xdg-runtime" MANPATH="$$root/usr/local/share/man" systemd-analyze --user verify \
		"$$root/verify-user/prefetchd.socket" "$$root/verify-user/prefetchd.service" 2>&1) \
		|| { echo "$$out"; echo "check-systemd: systemd-analyze --user verify failed"; exit 1; }; \
	[ -z "$$out" ] || { echo "$$out"; echo "check-systemd: systemd-analyze --user verify is not clean"; exit 1; }; \
	paths=$$(XDG_RUNTIME_DIR="$$root/xdg-runtime" systemd-analyze --user unit-paths); \
	for dir in /usr/local/lib/systemd/user /usr/lib/systemd/user; do \
		echo "$$paths" | grep -qx "$$dir" || { echo "check-systemd: $$dir is not on the user manager's unit path"; exit 1; }; \
	done; \
	threshold=$$(echo $(SECURITY_THRESHOLD) | awk '{ printf "%d", $$1 * 10 }'); \
	security=$$(systemd-analyze security --offline=true --threshold=$$threshold \
		"$$root/usr/local/lib/systemd/system/prefetchd.service" 2>&1) \
		|| { echo "$$security" | grep -E '✗|Overall'; echo "check-systemd: exposure above $(SECURITY_THRESHOLD)"; exit 1; }; \
	score=$$(echo "$$security" | sed -n 's/.*Overall exposure level for prefetchd.service: \([0-9.]*\).*/\1/p'); \
	systemd-sysusers --root="$$root" > /dev/null 2>&1; \
	grep -q '^prefetchd:' "$$root/etc/passwd" && grep -q '^prefetch:' "$$root/etc/group" \
		|| { echo "check-systemd: systemd-sysusers did not create prefetchd:prefetch from the installed snippet"; exit 1; }; \
	systemd-tmpfiles --root="$$root" --create > /dev/null 2>&1 || true; \
	[ -d "$$root/run/prefetchd" ] || { echo "check-systemd: systemd-tmpfiles did not create /run/prefetchd"; exit 1; }; \
	bash -n completions/prefetchctl.bash && zsh -n completions/_prefetchctl && fish --no-execute completions/prefetchctl.fish; \
	for page in docs/man/*.[158]; do \
		warnings=$$(groff -man -ww -z "$$page" 2>&1); [ -z "$$warnings" ] || { echo "$$page: $$warnings"; exit 1; }; \
	done; \
	$(MAKE) --no-print-directory uninstall DESTDIR=$$root PREFIX=/usr/local > /dev/null; \
	left=$$(find "$$root/usr" "$$root/etc/prefetchd" -type f 2>/dev/null || true); \
	[ -z "$$left" ] || { echo "check-systemd: make uninstall left $$left"; exit 1; }; \
	echo "check-systemd: install tree, ldd, systemd-analyze verify (system and user units), user unit path, security $$score (at most $(SECURITY_THRESHOLD)), sysusers, tmpfiles, completions, man pages, uninstall: ok"

clean:
	$(SWIFT) package clean
	rm -rf $(BUILD_DIR)/static-prefetchctl

# Benchmarks (bench/README.md): prefetchd side by side with curl, aria2c, wget2, gdk-pixbuf-thumbnailer, vipsthumbnail
# and ImageMagick, against nginx and a bandwidth-shaped origin on 127.0.0.1. gdk-pixbuf-thumbnailer comes with
# libgdk-pixbuf2.0-bin.
BENCH_PACKAGES := nginx aria2 wget2 curl hyperfine libvips-tools imagemagick libgdk-pixbuf2.0-bin python3

.PHONY: bench bench-quick bench-deps

## bench-deps: the origins and peers the benchmarks run
bench-deps: deps
	$(call apt_install,$(BENCH_PACKAGES))

## bench: every row B1-B6 with warm-up and repeats (under 20 minutes); writes bench/results/ and bench/README.md
bench: bench-deps release
	python3 bench/bench.py --bin-dir $(BUILD_DIR)/release

## bench-quick: the same rows at smaller sizes and fewer repeats (under 3 minutes); writes bench/results/ only
bench-quick: bench-deps release
	python3 bench/bench.py --quick --bin-dir $(BUILD_DIR)/release

# Stress (issue 9, stress/README.md): chaos (kill -9 during a prefetch), a hostile origin, hostile clients (with a
# libFuzzer target, Fuzz/), a full disk (a tmpfs mounted by the test) and access/egress checks. Needs root for the
# tmpfs, `ip addr` (a link-local address on lo) and setpriv; every process it starts is stopped by PID.
STRESS_PACKAGES := iproute2 util-linux python3

.PHONY: stress stress-quick stress-deps

## stress-deps: what the stress suite uses besides the tests' packages
stress-deps: test-deps lab-deps
	$(call apt_install,$(STRESS_PACKAGES))

## stress: every scenario at full scale (fuzzing for minutes); one table and the daemon's peak RSS per group
stress: stress-deps release
	python3 stress/stress.py --bin-dir $(BUILD_DIR)/release

## stress-quick: the same scenarios scaled down to seconds (part of `make test`)
stress-quick: stress-deps release
	python3 stress/stress.py --quick --bin-dir $(BUILD_DIR)/release

# Soak (issue 15, stress/README.md): every feature at once for SOAK_MINUTES; RSS, fds, threads, temporary files, WAL
# and get latency every 5 s to SOAK_CSV; fails when a column grows beyond noise after the warm-up.
SOAK_MINUTES ?= 20
SOAK_CSV ?= $(BUILD_DIR)/soak.csv

.PHONY: soak

## soak: 20 minutes of mixed load (`make soak SOAK_MINUTES=2` to try it); the samples go to .build/soak.csv
soak: stress-deps release
	python3 stress/soak.py --bin-dir $(BUILD_DIR)/release --minutes $(SOAK_MINUTES) --csv $(SOAK_CSV)

# Network lab (issue 16, lab/README.md): two network namespaces joined by a user-space delay line (lab/delayline.c,
# delay, rate, buffer, loss, outages) and nginx with TLS + HTTP/2 and plain HTTP/1.1 on the far side. Needs root.
LAB_PACKAGES := iproute2 nginx openssl curl gcc libc6-dev imagemagick python3

.PHONY: lab lab-deps lab-check lab-test

## lab-deps: what the network lab runs
lab-deps:
	$(call apt_install,$(LAB_PACKAGES))

## lab: compiles the delay line (.build/lab/delayline); start a lab with `python3 lab/lab.py up --delay 25 --rate 20`
lab: lab-deps
	python3 lab/lab.py build

## lab-check: measures the lab's link (round trip, rate, outage, loss) and its origins with curl; fails when off
lab-check: lab
	python3 lab/selfcheck.py

## lab-test: short tests of the lane transport on the network lab (issue 16): connections per lane, a drain's
## overlap and where it starts, promotion in place, private CA, back-to-back gets, a window that follows the path,
## the small background window after urgent work
## (part of `make test`; the debug binaries)
lab-test: lab build
	python3 lab/lab_tests.py --bin-dir .build/debug

.PHONY: bench-lab bench-lab-quick

## bench-lab: rows L1-L4 on the lab (urgent latency under a backlog, background drain, fast-lane bulk, a person
## scrolling) over HTTPS + HTTP/2 and HTTP/1.1 on two links, against curl and wget2 (about 25 minutes; bench/README.md)
bench-lab: bench-deps lab release
	python3 bench/lab_bench.py --bin-dir $(BUILD_DIR)/release

## bench-lab-quick: the same rows, fewer gets and files (about 3 minutes)
bench-lab-quick: bench-deps lab release
	python3 bench/lab_bench.py --quick --bin-dir $(BUILD_DIR)/release

# prefetchd: `make run` builds and starts the daemon; `make test` runs every check. Both install what they need.

SWIFT ?= swift
# What building and running need, and what the tests need besides.
BUILD_PACKAGES := libcurl4-openssl-dev libsqlite3-dev libgdk-pixbuf-2.0-dev pkg-config webp-pixbuf-loader libavif-gdk-pixbuf
TEST_PACKAGES := python3 sqlite3 squid tmux imagemagick
RELEASE_FLAGS := -c release --static-swift-stdlib

.PHONY: all deps test-deps build release test check-core run clean

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

release: deps
	$(SWIFT) build $(RELEASE_FLAGS)

## test: the whole suite plus the project's static checks
test: test-deps check-core
	$(SWIFT) build --build-tests
	$(SWIFT) test --no-parallel

## check-core: QueueCore stays pure (the Swift standard library only)
check-core:
	@if grep -rn '^import' Sources/QueueCore; then echo "QueueCore must import nothing but the standard library"; exit 1; fi

## run: release build, then the daemon in the foreground with its embedded defaults
run: release
	.build/release/prefetchd

clean:
	$(SWIFT) package clean

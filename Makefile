# prefetchd: `make run` builds and starts the daemon; `make test` runs every check. Both install what they need.

SWIFT ?= swift
APT_PACKAGES := libcurl4-openssl-dev libsqlite3-dev libgdk-pixbuf-2.0-dev pkg-config python3 sqlite3
RELEASE_FLAGS := -c release --static-swift-stdlib

.PHONY: all deps build release test check-core run clean

all: build

## deps: install the Debian packages the build and the tests need (apt-get as root; otherwise print the command)
deps:
	@missing=""; \
	for package in $(APT_PACKAGES); do \
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

build: deps
	$(SWIFT) build

release: deps
	$(SWIFT) build $(RELEASE_FLAGS)

## test: the whole suite plus the project's static checks
test: deps check-core
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

/// The `capacity` smallest of the keys offered, kept in a max-heap: a short list taken from many keys costs one
/// comparison with the largest kept for most of them, and sorts only what it keeps.
struct SmallestKeys {
    private let capacity: Int
    /// A max-heap: every key is at least as large as its children.
    private var heap: [String] = []

    init(capacity: Int) {
        self.capacity = max(0, capacity)
        heap.reserveCapacity(min(self.capacity, 4_096))
    }

    mutating func offer(_ key: String) {
        if heap.count < capacity {
            heap.append(key)
            siftUp(heap.count - 1)
        } else if let largest = heap.first, key < largest {
            heap[0] = key
            siftDown(0)
        }
    }

    /// What it kept, smallest first.
    var sorted: [String] { heap.sorted() }

    private mutating func siftUp(_ start: Int) {
        var child = start
        while child > 0 {
            let parent = (child - 1) / 2
            guard heap[parent] < heap[child] else { return }
            heap.swapAt(parent, child)
            child = parent
        }
    }

    private mutating func siftDown(_ start: Int) {
        var parent = start
        while true {
            let left = 2 * parent + 1, right = left + 1
            var largest = parent
            if left < heap.count, heap[largest] < heap[left] { largest = left }
            if right < heap.count, heap[largest] < heap[right] { largest = right }
            guard largest != parent else { return }
            heap.swapAt(parent, largest)
            parent = largest
        }
    }
}

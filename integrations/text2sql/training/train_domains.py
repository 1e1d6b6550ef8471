"""The vocabulary of the training schemas: workflow domains, each a set of table roles.

A real workflow database has a lookup table of places, a people table, a catalog, a header table of
events (orders, bookings), a line table joining the header to the catalog, and often a staff table and a
rating table. Every domain names the tables of those roles and the nouns its questions use, in English
and Korean; the place table is shared vocabulary (:data:`PLACES`). None of the table names may be one of
the shipped evaluation set's (``train_data`` checks it), so the adapter learns to read a DDL it has never
seen rather than to remember the eval databases.
"""

from __future__ import annotations

from dataclasses import dataclass


@dataclass(frozen=True)
class Noun:
    table: str
    key: str  # the primary key column (also the foreign key's name in a child table)
    en: str  # singular
    en_pl: str
    ko: str


@dataclass(frozen=True)
class Column:
    name: str
    en: str
    ko: str
    values: tuple = ()  # enum values for a category column; (low, high) for a number column
    unit_en: str = ""
    unit_ko: str = ""


@dataclass(frozen=True)
class Domain:
    name: str
    people: Noun  # customers of the domain: FK to the place, a date, a tier
    tier: Column
    catalog: Noun  # what is sold or booked: category, price, a stock/size number
    category: Column
    price: Column
    size: Column
    header: Noun  # one event: FK to people (and staff), a date, a status
    statuses: tuple[str, ...]  # always holds 'cancelled'
    line: Noun  # header x catalog: quantity, unit price
    staff: Noun
    rating: Noun  # FK to the header: stars 1-5 and a comment
    words: tuple[str, ...]  # catalog item names
    verb_en: str = "bought"  # what people do to catalog items: "Which dishes did X order?"
    verb_ko: str = "구매한"


def _n(table: str, en: str, en_pl: str, ko: str, key: str = "") -> Noun:
    return Noun(table, key or f"{en.replace(' ', '_')}_id", en, en_pl, ko)


def _c(name: str, en: str, ko: str, values: tuple = (), unit_en: str = "", unit_ko: str = "") -> Column:
    return Column(name, en, ko, tuple(values), unit_en, unit_ko)


# The place lookup table: its name varies per schema; none is an eval table ("cities" is).
PLACES: tuple[Noun, ...] = (
    _n("towns", "town", "towns", "도시"), _n("regions", "region", "regions", "지역"),
    _n("locations", "location", "locations", "지역"), _n("areas", "area", "areas", "지역"),
    _n("districts", "district", "districts", "구역"), _n("metros", "metro", "metros", "도시"),
)
PLACE_CODES: tuple[Column, ...] = (
    _c("country", "country", "국가", ("KR", "JP", "US", "DE", "FR")),
    _c("country_code", "country code", "국가 코드", ("KR", "JP", "US", "GB", "VN")),
    _c("region_code", "region code", "지역 코드", ("CAP", "SOU", "EST", "WST", "NTH")),
)
# A staff member's pay over time, one row per period, the current one open-ended (its end date NULL):
# (the table, the amount's English and Korean words). None is an eval table ("salaries" is).
HISTORIES: tuple[tuple[Noun, str, str], ...] = (
    (_n("pay_history", "pay record", "pay records", "급여 이력", "pay_record_id"), "pay", "급여"),
    (_n("wage_rates", "wage rate", "wage rates", "임금 이력", "wage_rate_id"), "wage", "임금"),
    (_n("salary_history", "salary record", "salary records", "연봉 이력", "salary_record_id"), "salary", "연봉"),
    (_n("compensation_history", "compensation record", "compensation records", "보수 이력", "record_id"),
     "compensation", "보수"),
)
CITY_NAMES = ("서울", "부산", "대구", "인천", "광주", "대전", "제주", "수원", "Tokyo", "Osaka", "Berlin", "Paris",
              "London", "Chicago", "Toronto", "Sydney", "Hanoi", "Busan Port")
CITY_CODES = {"서울": "KR", "부산": "KR", "대구": "KR", "인천": "KR", "광주": "KR", "대전": "KR", "제주": "KR",
              "수원": "KR", "Tokyo": "JP", "Osaka": "JP", "Berlin": "DE", "Paris": "FR", "London": "GB",
              "Chicago": "US", "Toronto": "CA", "Sydney": "AU", "Hanoi": "VN", "Busan Port": "KR"}

_CANCEL = "cancelled"

DOMAINS: tuple[Domain, ...] = (
    Domain("pharmacy", _n("patients", "patient", "patients", "환자"),
           _c("coverage", "insurance coverage", "보험 종류", ("public", "private", "none")),
           _n("medicines", "medicine", "medicines", "약품"),
           _c("drug_class", "drug class", "약효 분류", ("antibiotic", "painkiller", "vitamin", "antiviral")),
           _c("price", "price", "가격", (1500, 90000), "KRW", "원"), _c("stock_units", "stock", "재고", (0, 500)),
           _n("prescriptions", "prescription", "prescriptions", "처방전"), ("filled", "waiting", _CANCEL),
           _n("prescription_lines", "prescription line", "prescription lines", "처방 항목", "line_id"),
           _n("pharmacists", "pharmacist", "pharmacists", "약사"),
           _n("pharmacy_feedback", "feedback", "feedback entries", "평가", "feedback_id"),
           ("Amoxil", "Tylenol", "타이레놀", "Vitamin C", "게보린", "Tamiflu", "Advil", "판콜", "Zyrtec", "베아제"),
           "were prescribed", "처방받은"),
    Domain("hotel", _n("guests", "guest", "guests", "투숙객"),
           _c("loyalty", "loyalty level", "멤버십 등급", ("blue", "platinum", "diamond")),
           _n("room_types", "room type", "room types", "객실 유형"),
           _c("view_type", "view", "전망", ("ocean", "city", "garden", "mountain")),
           _c("nightly_rate", "nightly rate", "1박 요금", (60000, 600000), "KRW", "원"),
           _c("max_occupancy", "max occupancy", "최대 인원", (1, 6)),
           _n("reservations", "reservation", "reservations", "예약"), ("confirmed", "checked_out", "no_show", _CANCEL),
           _n("reservation_rooms", "reserved room", "reserved rooms", "예약 객실", "reservation_room_id"),
           _n("receptionists", "receptionist", "receptionists", "프런트 직원"),
           _n("stay_reviews", "stay review", "stay reviews", "숙박 후기"),
           ("Deluxe Twin", "Ocean Suite", "스탠다드 더블", "Family Room", "디럭스 킹", "Penthouse", "Hanok Room",
            "Garden Villa"), "booked", "예약한"),
    Domain("airline", _n("passengers", "passenger", "passengers", "승객"),
           _c("mileage_tier", "mileage tier", "마일리지 등급", ("standard", "silver", "prestige")),
           _n("flights", "flight", "flights", "항공편"),
           _c("cabin", "cabin", "좌석 등급", ("economy", "business", "first")),
           _c("fare", "fare", "운임", (50000, 2500000), "KRW", "원"),
           _c("seats_left", "seats left", "잔여 좌석", (0, 300)),
           _n("tickets", "ticket", "tickets", "항공권"), ("issued", "flown", "refunded", _CANCEL),
           _n("ticket_segments", "ticket segment", "ticket segments", "여정 구간", "segment_id"),
           _n("agents", "agent", "agents", "발권 직원"),
           _n("flight_surveys", "survey", "surveys", "설문 평가", "survey_id"),
           ("KE017", "OZ202", "7C1101", "LJ305", "KE901", "TW215", "OZ741", "ZE603", "KE085", "BX142"),
           "flew on", "이용한"),
    Domain("cinema", _n("moviegoers", "moviegoer", "moviegoers", "관객"),
           _c("membership", "membership", "멤버십", ("free", "vip", "vvip")),
           _n("films", "film", "films", "영화"),
           _c("genre", "genre", "장르", ("drama", "comedy", "action", "horror", "animation")),
           _c("ticket_price", "ticket price", "관람료", (7000, 22000), "KRW", "원"),
           _c("runtime_min", "runtime", "상영 시간", (80, 190), "minutes", "분"),
           _n("ticket_orders", "ticket order", "ticket orders", "예매"), ("paid", "used", _CANCEL),
           _n("ticket_lines", "ticket line", "ticket lines", "예매 항목", "ticket_line_id"),
           _n("ushers", "usher", "ushers", "안내 직원"),
           _n("film_reviews", "film review", "film reviews", "관람평"),
           ("기생충", "Inception", "Dune", "명량", "Frozen", "부산행", "Up", "Coco", "Alien", "올드보이"),
           "watched", "관람한"),
    Domain("restaurant", _n("diners", "diner", "diners", "손님"),
           _c("status_level", "regular status", "단골 등급", ("new", "regular", "vip")),
           _n("dishes", "dish", "dishes", "메뉴"),
           _c("cuisine", "cuisine", "요리 종류", ("korean", "italian", "chinese", "japanese")),
           _c("menu_price", "menu price", "메뉴 가격", (5000, 60000), "KRW", "원"),
           _c("calories", "calories", "칼로리", (150, 1400), "kcal", "kcal"),
           _n("tabs", "tab", "tabs", "주문서"), ("open", "paid", _CANCEL),
           _n("tab_items", "tab item", "tab items", "주문 항목", "tab_item_id"),
           _n("waiters", "waiter", "waiters", "서버"),
           _n("dish_reviews", "dish review", "dish reviews", "음식 리뷰"),
           ("비빔밥", "김치찌개", "Pasta", "Ramen", "Sushi", "불고기", "Pizza", "냉면", "Tacos", "떡볶이", "Risotto"),
           "ordered", "주문한"),
    Domain("gym", _n("trainees", "trainee", "trainees", "회원"),
           _c("plan_type", "plan", "요금제", ("monthly", "quarterly", "yearly")),
           _n("classes", "class", "classes", "수업"),
           _c("discipline", "discipline", "운동 종류", ("yoga", "pilates", "spinning", "boxing", "crossfit")),
           _c("fee", "fee", "수강료", (10000, 80000), "KRW", "원"), _c("capacity", "capacity", "정원", (5, 40)),
           _n("class_bookings", "class booking", "class bookings", "수업 예약"), ("booked", "attended", _CANCEL),
           _n("booking_slots", "booking slot", "booking slots", "예약 슬롯", "slot_id"),
           _n("coaches", "coach", "coaches", "코치"),
           _n("class_feedback", "class feedback", "class feedback entries", "수업 평가", "feedback_id"),
           ("Morning "
            "Yoga", "파워 스피닝", "Boxing 101", "필라테스 기초", "HIIT", "Core Blast", "저녁 요가", "Crossfit"),
           "took", "수강한"),
    Domain("car_rental", _n("renters", "renter", "renters", "대여 고객"),
           _c("license_class", "license class", "면허 종류", ("class1", "class2", "intl")),
           _n("cars", "car", "cars", "차량"),
           _c("segment", "segment", "차급", ("compact", "sedan", "suv", "van", "ev")),
           _c("daily_rate", "daily rate", "일일 요금", (30000, 250000), "KRW", "원"),
           _c("seats", "seats", "좌석 수", (2, 11)),
           _n("rentals", "rental", "rentals", "대여"), ("reserved", "on_road", "returned", _CANCEL),
           _n("rental_days", "rental day", "rental days", "대여 내역", "rental_day_id"),
           _n("counter_staff", "counter clerk", "counter clerks", "카운터 직원", "clerk_id"),
           _n("rental_reviews", "rental review", "rental reviews", "대여 후기"),
           ("Avante", "Sonata", "K5", "Tucson", "Ioniq 5", "Model 3", "Carnival", "Corolla", "Golf"),
           "rented", "대여한"),
    Domain("concert", _n("fans", "fan", "fans", "팬"),
           _c("fanclub", "fan club level", "팬클럽 등급", ("none", "official", "premium")),
           _n("shows", "show", "shows", "공연"),
           _c("genre", "genre", "장르", ("pop", "rock", "jazz", "hiphop", "classical")),
           _c("base_price", "base price", "기본 가격", (30000, 250000), "KRW", "원"),
           _c("hall_size", "hall size", "공연장 규모", (200, 20000), "seats", "석"),
           _n("ticket_purchases", "ticket purchase", "ticket purchases", "티켓 구매", "purchase_id"),
           ("paid", "printed", _CANCEL),
           _n("purchase_seats", "purchased seat", "purchased seats", "구매 좌석", "purchase_seat_id"),
           _n("box_officers", "box officer", "box officers", "매표 직원"),
           _n("show_reviews", "show review", "show reviews", "공연 후기"),
           ("Jazz Night", "록 페스티벌", "Spring Gala", "K-Pop Live", "Opera Classics", "힙합 콘서트", "Indie Fest"),
           "saw", "관람한"),
    Domain("bakery", _n("patrons", "patron", "patrons", "고객"),
           _c("stamp_level", "stamp level", "스탬프 등급", ("basic", "sweet", "royal")),
           _n("pastries", "pastry", "pastries", "빵"),
           _c("kind", "kind", "종류", ("bread", "cake", "cookie", "tart")),
           _c("unit_cost", "unit cost", "개당 가격", (1500, 45000), "KRW", "원"),
           _c("daily_batch", "daily batch", "일일 생산량", (5, 200)),
           _n("purchases", "purchase", "purchases", "구매"), ("paid", "picked_up", _CANCEL),
           _n("purchase_lines", "purchase line", "purchase lines", "구매 항목", "purchase_line_id"),
           _n("bakers", "baker", "bakers", "제빵사"),
           _n("pastry_reviews", "pastry review", "pastry reviews", "빵 리뷰"),
           ("소금빵", "Croissant", "Baguette", "단팥빵", "Cheesecake", "Macaron", "크림빵", "Scone", "Tiramisu"),
           "bought", "구매한"),
    Domain("pet_shop", _n("pet_owners", "pet owner", "pet owners", "반려인", "owner_id"),
           _c("club", "club level", "클럽 등급", ("puppy", "buddy", "best")),
           _n("pet_supplies", "pet supply", "pet supplies", "용품", "supply_id"),
           _c("animal", "animal", "대상 동물", ("dog", "cat", "bird", "fish")),
           _c("price", "price", "가격", (2000, 150000), "KRW", "원"), _c("on_hand", "stock on hand", "재고", (0, 300)),
           _n("pet_orders", "pet order", "pet orders", "주문", "pet_order_id"), ("placed", "delivered", _CANCEL),
           _n("pet_order_lines", "pet order line", "pet order lines", "주문 항목", "pet_order_line_id"),
           _n("groomers", "groomer", "groomers", "미용사"),
           _n("supply_reviews", "supply review", "supply reviews", "용품 리뷰"),
           ("Dog Food 5kg", "고양이 모래", "Chew Toy", "Bird Seed", "캣타워", "Leash", "어항 필터", "Cat Treats"),
           "bought", "구매한"),
    Domain("florist", _n("buyers", "buyer", "buyers", "구매자"),
           _c("segment", "segment", "고객 구분", ("personal", "wedding", "corporate")),
           _n("bouquets", "bouquet", "bouquets", "꽃다발"),
           _c("flower", "main flower", "주요 꽃", ("rose", "tulip", "lily", "peony")),
           _c("price", "price", "가격", (15000, 200000), "KRW", "원"), _c("stems", "stems", "송이 수", (3, 101)),
           _n("flower_orders", "flower order", "flower orders", "꽃 주문", "flower_order_id"),
           ("received", "delivered", _CANCEL),
           _n("flower_order_lines", "flower order line", "flower order lines", "주문 항목", "flower_line_id"),
           _n("florists", "florist", "florists", "플로리스트"),
           _n("bouquet_reviews", "bouquet review", "bouquet reviews", "꽃다발 후기"),
           ("Red Rose Box", "튤립 한 다발", "Wedding White", "작약 부케", "Sunny Day", "Lily Basket", "Mini Posy"),
           "ordered", "주문한"),
    Domain("travel", _n("travelers", "traveler", "travelers", "여행자"),
           _c("club", "club level", "클럽 등급", ("basic", "plus", "elite")),
           _n("tour_packages", "tour package", "tour packages", "여행 상품", "package_id"),
           _c("theme", "theme", "테마", ("beach", "city", "hiking", "food")),
           _c("package_price", "package price", "상품 가격", (200000, 5000000), "KRW", "원"),
           _c("nights", "nights", "숙박 일수", (1, 14)),
           _n("trip_bookings", "trip booking", "trip bookings", "여행 예약", "trip_booking_id"),
           ("booked", "completed", _CANCEL),
           _n("trip_booking_items", "trip booking item", "trip booking items", "예약 항목", "trip_item_id"),
           _n("guides", "guide", "guides", "가이드"),
           _n("trip_reviews", "trip review", "trip reviews", "여행 후기"),
           ("Jeju Walk", "다낭 4일", "Kyoto Food Tour", "Swiss Alps", "방콕 야경", "Bali Beach", "Paris City"),
           "booked", "예약한"),
    Domain("laundry", _n("clients", "client", "clients", "고객"),
           _c("plan_type", "plan", "요금제", ("pay_per_use", "weekly", "monthly")),
           _n("garment_services", "garment service", "garment services", "세탁 서비스", "service_id"),
           _c("service_kind", "service kind", "서비스 종류", ("wash", "dry_clean", "iron", "repair")),
           _c("price", "price", "가격", (3000, 50000), "KRW", "원"),
           _c("turnaround_h", "turnaround", "소요 시간", (4, 96), "hours", "시간"),
           _n("laundry_tickets", "laundry ticket", "laundry tickets", "세탁 접수", "laundry_ticket_id"),
           ("received", "ready", "collected", _CANCEL),
           _n("laundry_ticket_lines", "laundry ticket line", "laundry ticket lines", "접수 항목", "ticket_line_id"),
           _n("laundry_staff", "laundry worker", "laundry workers", "세탁 직원", "worker_id"),
           _n("laundry_reviews", "laundry review", "laundry reviews", "세탁 후기"),
           ("Shirt Wash", "코트 드라이", "Suit Press", "이불 세탁", "Hem Repair", "Dress Clean", "운동화 세탁"),
           "used", "이용한"),
    Domain("clinic_vet", _n("pet_parents", "pet parent", "pet parents", "보호자", "parent_id"),
           _c("care_plan", "care plan", "관리 플랜", ("basic", "care", "total")),
           _n("vet_services", "vet service", "vet services", "진료 항목", "vet_service_id"),
           _c("service_type", "service type", "진료 종류", ("vaccine", "checkup", "dental", "surgery")),
           _c("price", "price", "가격", (10000, 900000), "KRW", "원"),
           _c("duration_min", "duration", "소요 시간", (10, 180), "minutes", "분"),
           _n("vet_visits", "vet visit", "vet visits", "내원", "visit_id"), ("scheduled", "done", _CANCEL),
           _n("vet_visit_lines", "visit line", "visit lines", "진료 내역", "visit_line_id"),
           _n("vets", "vet", "vets", "수의사"),
           _n("visit_reviews", "visit review", "visit reviews", "진료 후기"),
           ("Rabies Shot", "건강검진", "Teeth Cleaning", "중성화 수술", "X-ray", "Blood Test", "예방접종"),
           "received", "받은"),
    Domain("coffee", _n("regulars", "regular", "regulars", "단골 고객", "regular_id"),
           _c("card", "card level", "카드 등급", ("green", "gold", "black")),
           _n("beverages", "beverage", "beverages", "음료"),
           _c("base", "base", "베이스", ("espresso", "tea", "milk", "juice")),
           _c("price", "price", "가격", (2500, 9000), "KRW", "원"),
           _c("size_ml", "size", "용량", (240, 710), "ml", "ml"),
           _n("cafe_orders", "cafe order", "cafe orders", "주문", "cafe_order_id"), ("made", "served", _CANCEL),
           _n("cafe_order_lines", "cafe order line", "cafe order lines", "주문 항목", "cafe_line_id"),
           _n("baristas", "barista", "baristas", "바리스타"),
           _n("drink_reviews", "drink review", "drink reviews", "음료 리뷰"),
           ("Americano", "카페라떼", "Flat White", "녹차라떼", "Chai", "바닐라라떼", "Mocha", "Yuzu Tea"),
           "ordered", "주문한"),
)
